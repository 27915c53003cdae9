"""The other things lineage reads: a pipeline record, a synthesized set, a merge written
elsewhere and a published repo (each from the record its job left), and what it refuses."""

from __future__ import annotations

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.export import jobs as export_jobs
from dragonfarm_core.rundir import files, pipeline_record
from dragonfarm_core.synthesis import files as synthesis_files
from tests.lineage.loop import finish


def succeeded_job(run: dragon.Run, kind: str, result: dict | None = None, **status) -> None:
    """A job folder on the run as a finished job leaves it."""
    job_dir = files.new_job_dir(run.dir, kind)
    files.write_status(job_dir, {"state": "succeeded", "kind": kind, **status})
    if result is not None:
        files.write_json(job_dir / export_jobs.RESULT, result)


def test_a_pipeline_links_to_the_runs_its_steps_trained(chain):
    path = pipeline_record.create(chain.runs, "loop", "m", [{"kind": "train"}, {"kind": "prefer"}],
                                  background=False)  # fmt: skip
    pipeline_record.update_step(path, 0, state="succeeded", run_dir=str(chain.sft.dir))
    pipeline_record.update_step(path, 1, state="succeeded", run_dir=str(chain.dpo.dir))
    lin = dragon.lineage(path.stem, runs_dir=chain.runs)
    assert lin.focus_node.kind == "pipeline" and lin.focus_node.detail == "2 steps, queued"
    assert {(n.id, e.link) for e in lin.edges for n in [lin.node(e.target)]
            if e.source == lin.focus} == {(chain.sft.id, "step 1 (train)"),
                                          (chain.dpo.id, "step 2 (prefer)")}  # fmt: skip
    # What went into its runs comes along: the data of the first step.
    assert "tickets.csv" in {n.id for n in lin.nodes}
    assert dragon.lineage(path).focus == lin.focus  # by its record too
    assert lin.focus in {n.key for n in dragon.lineage(chain.dpo).nodes}


def test_a_synthesized_set_links_to_its_student_run_and_the_run_trained_on_it(chain, model_dir):
    path = synthesis_files.output_path(None, chain.runs, "pairs")
    table = [{"prompt": "Hi", "chosen": "Hello!", "rejected": "What."}] * 3
    record = {"kind": "synthesize_pairs", "in": 4, "kept": 3, "dropped": {"teacher_failed": 1},
              "student": {"provider": "local", "model": str(chain.sft.dir)}}  # fmt: skip
    ds = synthesis_files.write_result(path, table, record, "pairs", pairs=True, like=None)
    run = finish(dragon.prefer(ds, chain.sft, runs_dir=chain.runs))
    lin = dragon.lineage(path)
    assert lin.focus_node.kind == "synthesized" and lin.focus_node.detail == "3 kept of 4 prompts"
    assert [(n.id, e.link) for e in lin.edges for n in [lin.node(e.source)]
            if e.target == lin.focus] == [(chain.sft.id, "student of")]  # fmt: skip
    assert [n.id for n in lin.children(lin.focus)] == [run.id]


def test_a_merge_elsewhere_and_a_published_repo_come_from_the_jobs_records(chain, tmp_path):
    from tests.lineage.loop import merged

    elsewhere = tmp_path / "my-model"
    merged(chain.sft)  # a complete merged/ to copy the marker from
    (chain.sft.dir / "merged").rename(elsewhere)
    succeeded_job(chain.sft, "merge", out_dir=str(elsewhere))
    succeeded_job(chain.dpo, "publish", {"url": "https://hub.example/me/bot", "repo": "me/bot",
                                         "what": "merged", "files": ["a", "b"]})  # fmt: skip
    lin = dragon.lineage(elsewhere, runs_dir=chain.runs)
    assert (lin.focus_node.kind, lin.focus_node.path) == ("merged", str(elsewhere))
    assert [n.id for n in lin.parents(lin.focus)] == [chain.sft.id]

    published = dragon.lineage("me/bot", runs_dir=chain.runs)
    node = published.focus_node
    assert (node.kind, node.state, node.path) == (
        "published",
        "remote",
        "https://hub.example/me/bot",
    )
    assert [n.kind for n in published.parents(published.focus)] == ["merged"]
    by_url = dragon.lineage("https://hub.example/me/bot", runs_dir=chain.runs)
    assert by_url.focus == published.focus


def test_a_model_registered_with_ollama_comes_from_the_gguf_it_was_made_of(chain):
    """serve_ollama leaves <run>/ollama/registered.json (name, server, GGUF): its last
    registration is a remote node under that GGUF, found by its name too."""
    from dragonfarm_core.export.ollama import register

    folder = chain.dpo.dir / register.OLLAMA_DIR
    folder.mkdir()
    files.write_json(folder / register.REGISTERED, {
        "name": "support-bot", "url": "http://127.0.0.1:11434", "gguf": str(chain.gguf),
        "registered_at": "2026-12-07T10:00:00+00:00"})  # fmt: skip
    lin = dragon.lineage("support-bot", runs_dir=chain.runs)
    node = lin.focus_node
    assert (node.kind, node.state, node.path, node.time) == (
        "ollama", "remote", "http://127.0.0.1:11434", "2026-12-07T10:00:00+00:00")  # fmt: skip
    (parent,) = lin.parents(lin.focus)
    assert (parent.kind, parent.path) == ("gguf", str(chain.gguf.resolve()))
    assert [e.link for e in lin.edges if e.target == lin.focus] == ["registered with Ollama"]
    # From the run, the registration is among what came of it; with its GGUF gone, the run's.
    assert lin.focus in {n.key for n in dragon.lineage(chain.dpo).nodes}
    chain.gguf.unlink()
    (parent,) = dragon.lineage("support-bot", runs_dir=chain.runs).parents(lin.focus)
    assert (parent.kind, parent.id) == ("run", chain.dpo.id)
    # A torn record is no node and no error.
    (folder / register.REGISTERED).write_text("{not json")
    assert "ollama" not in {n.kind for n in dragon.lineage(chain.dpo).nodes}


def test_a_data_file_no_run_used_is_a_lineage_of_one(chain, tmp_path):
    lone = tmp_path / "new.jsonl"
    lone.write_text('{"prompt": "a", "response": "b"}\n')
    lin = dragon.lineage(lone, runs_dir=chain.runs)
    assert [n.id for n in lin.nodes] == ["new.jsonl"] and lin.edges == ()


@pytest.mark.parametrize(
    "bad, error",
    [
        ("no-such-run", ValueError),
        ("/nowhere/at/all.txt", ValueError),
        (42, TypeError),
        ("", TypeError),
        ("../elsewhere", ValueError),
    ],
)
def test_bad_input_says_what_lineage_takes(chain, bad, error):
    with pytest.raises(error, match="lineage\\(\\) takes a run|outside the runs directory"):
        dragon.lineage(bad, runs_dir=chain.runs)


def test_a_dataset_in_memory_is_refused_with_what_to_pass(chain):
    import pandas as pd

    ds = dragon.dataset(pd.DataFrame({"q": ["a"], "a": ["b"]}))
    with pytest.raises(TypeError, match="not read from a file"):
        dragon.lineage(ds, runs_dir=chain.runs)
