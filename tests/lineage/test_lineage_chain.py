"""dragon.lineage() on the feedback loop, checked from each end: data -> SFT run -> chat feedback
-> pairs -> DPO run -> merged folder -> GGUF."""

from __future__ import annotations

import dragonfarm_core as dragon


def kinds(lin: dragon.Lineage) -> dict[str, str]:
    """id -> kind of every node."""
    return {n.id: n.kind for n in lin.nodes}


def links(lin: dragon.Lineage) -> set[tuple[str, str, str]]:
    """(source id, link, target id) of every edge."""
    return {(lin.node(e.source).id, e.link, lin.node(e.target).id) for e in lin.edges}


def test_from_the_data_file_everything_downstream_is_reached(chain):
    lin = dragon.lineage(chain.data, runs_dir=chain.runs)
    sft, dpo = chain.sft.id, chain.dpo.id
    assert lin.focus_node.kind == "dataset" and lin.focus_node.path == str(chain.data)
    assert links(lin) == {
        ("tickets.csv", "trained on", sft),
        (sft, "chatted with", f"feedback on {sft}"),
        (f"feedback on {sft}", "4 of its events", "pairs-round1.jsonl"),
        # the liked and the edited reply
        (f"feedback on {sft}", "2 of its events", "sft-round1.jsonl"),
        ("pairs-round1.jsonl", "trained on", dpo),
        (sft, "continued from", dpo),
        (dpo, "merged", f"{dpo}/merged"),
        (f"{dpo}/merged", "converted", "merged-q8_0.gguf"),
    }
    # Left to right: every link goes from an earlier generation to a later one.
    assert all(lin.generation(e.source) < lin.generation(e.target) for e in lin.edges)
    assert lin.generation(lin.focus) == 0
    assert {n.state for n in lin.nodes} == {"present"}


def test_from_the_gguf_the_whole_history_back_to_the_data(chain):
    lin = dragon.lineage(chain.gguf)
    assert lin.focus_node.kind == "gguf"
    assert kinds(lin) == {
        "tickets.csv": "dataset",
        chain.sft.id: "run",
        f"feedback on {chain.sft.id}": "feedback",
        "pairs-round1.jsonl": "feedback_export",
        chain.dpo.id: "run",
        f"{chain.dpo.id}/merged": "merged",
        "merged-q8_0.gguf": "gguf",
    }
    assert [n.id for n in lin.parents(lin.focus)] == [f"{chain.dpo.id}/merged"]
    assert lin.children(lin.focus) == []


def test_from_the_middle_both_sides_and_nothing_unrelated(chain, model_dir):
    other = dragon.train(
        dragon.dataset(chain.data).map(prompt="question", response="answer"),
        str(model_dir), runs_dir=chain.runs,
    )  # fmt: skip
    lin = dragon.lineage(chain.pairs, runs_dir=chain.runs)
    assert lin.focus_node.kind == "feedback_export"
    assert chain.dpo.id in kinds(lin) and "tickets.csv" in kinds(lin)
    # Another run on the same data is the data's child, not the pairs' ancestor.
    assert other.id not in kinds(lin)
    assert other.id in kinds(dragon.lineage(chain.data, runs_dir=chain.runs))


def test_a_run_is_named_by_its_object_its_id_or_its_folder(chain):
    by_object = dragon.lineage(chain.dpo)
    by_id = dragon.lineage(chain.dpo.id, runs_dir=chain.runs)
    by_folder = dragon.lineage(str(chain.dpo.dir))
    assert by_object.to_dict() == by_id.to_dict() == by_folder.to_dict()
    assert by_object.focus_node.detail == "dpo, succeeded"
    assert {n.id for n in by_object.parents(by_object.focus)} == {
        "pairs-round1.jsonl",
        chain.sft.id,
    }


def test_a_dataset_object_is_its_file(chain):
    ds = dragon.dataset(chain.pairs)
    # A feedback export names its runs dir by where it lies (<runs_dir>/feedback/).
    assert dragon.lineage(ds).focus == dragon.lineage(chain.pairs, runs_dir=chain.runs).focus


def test_the_repr_reads_as_a_list_of_what_came_from_what(chain):
    text = repr(dragon.lineage(chain.dpo))
    assert text.startswith(f"Lineage of run {chain.dpo.id}: 7 nodes, 7 links")
    assert f"run {chain.dpo.id} (dpo, succeeded)  <- focus" in text
    assert f"continued from: {chain.sft.id}" in text
    assert "feedback on" in text and "4 events: 1 up, 2 down, 1 edit" in text


def test_to_dict_is_json_ready(chain):
    import json

    d = dragon.lineage(chain.dpo).to_dict()
    assert json.loads(json.dumps(d)) == d
    assert {"key", "kind", "id", "path", "time", "state", "detail", "generation"} == set(
        d["nodes"][0]
    )
    assert set(d["edges"][0]) == {"source", "target", "link"}
