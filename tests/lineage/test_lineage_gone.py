"""Parents that are no longer where a config names them: archived (dragon.archive_run moved the
folder under archived/) and deleted (dragon.delete_run removed it). Both show as such, from the
child and as the focus; neither is an error."""

from __future__ import annotations

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.rundir import files


def test_an_archived_parent_shows_as_archived(chain):
    # The DPO run continues from the SFT run, so archiving it takes force (it says so).
    with pytest.raises(RuntimeError, match="starting point"):
        dragon.archive_run(chain.sft, runs_dir=chain.runs)
    dragon.archive_run(chain.sft, runs_dir=chain.runs, force=True)
    moved = chain.runs / files.ARCHIVED_DIR / chain.sft.id

    lin = dragon.lineage(chain.dpo)
    parent = next(n for n in lin.parents(lin.focus) if n.kind == "run")
    assert (parent.id, parent.state, parent.path) == (chain.sft.id, "archived", str(moved))
    # Still linked on both sides: to its data, and to the feedback given on it.
    assert [n.id for n in lin.parents(parent.key)] == ["tickets.csv"]
    assert {n.kind for n in lin.children(parent.key)} == {"run", "feedback"}

    # The archived run itself, by id: its child is still found.
    from_parent = dragon.lineage(chain.sft.id, runs_dir=chain.runs)
    assert from_parent.focus_node.state == "archived"
    assert chain.dpo.id in {n.id for n in from_parent.children(from_parent.focus)}


def test_a_deleted_parent_shows_as_deleted(chain):
    dragon.delete_run(chain.sft, runs_dir=chain.runs, force=True)
    lin = dragon.lineage(chain.dpo)
    parent = next(n for n in lin.parents(lin.focus) if n.kind == "run")
    assert (parent.id, parent.state, parent.time) == (chain.sft.id, "deleted", None)
    assert parent.path == str(chain.sft.dir)
    assert "[deleted]" in repr(lin)
    # The deleted run's folder, named as the focus: the configs that name it still tell.
    from_gone = dragon.lineage(chain.sft.dir, runs_dir=chain.runs)
    assert from_gone.focus_node.state == "deleted"
    assert {n.id for n in from_gone.children(from_gone.focus)} >= {chain.dpo.id}


def test_a_deleted_data_file_shows_as_deleted(chain):
    chain.data.unlink()
    lin = dragon.lineage(chain.sft)
    data = lin.parents(lin.focus)[0]
    assert (data.id, data.state) == ("tickets.csv", "deleted")


def test_a_run_archived_with_its_parent_finds_it_under_archived(chain):
    dragon.archive_run(chain.dpo, runs_dir=chain.runs)
    dragon.archive_run(chain.sft, runs_dir=chain.runs, force=True)  # the DPO run names it
    lin = dragon.lineage(chain.dpo.id, runs_dir=chain.runs)
    runs = {n.id: n.state for n in lin.nodes if n.kind == "run"}
    assert runs == {chain.sft.id: "archived", chain.dpo.id: "archived"}
    assert {n.kind for n in lin.children(lin.focus)} == {"merged"}


def test_torn_records_are_left_out_never_an_error(chain):
    """A record torn by a killed writer (a pipeline's, a synthesized set's, a publish job's, an
    Ollama registration's) or a garbled line in a feedback export: lineage still reads the
    rest."""
    from dragonfarm_core.export.ollama import register

    whole = {n.key for n in dragon.lineage(chain.dpo).nodes}
    for folder in (files.PIPELINES_DIR, files.SYNTHETIC_DIR):
        (chain.runs / folder).mkdir(exist_ok=True)
    (chain.runs / files.PIPELINES_DIR / "20261207-loop.json").write_text('{"steps": [')
    (chain.runs / files.SYNTHETIC_DIR / "pairs-20261207.synthesis.json").write_text("[1, 2")
    publish = files.new_job_dir(chain.dpo.dir, "publish")
    files.write_status(publish, {"state": "succeeded", "kind": "publish"})
    (publish / "result.json").write_text('{"repo": "me/bo')
    (chain.dpo.dir / register.OLLAMA_DIR).mkdir()
    (chain.dpo.dir / register.OLLAMA_DIR / register.REGISTERED).write_text("\x00\x01")
    rows = chain.pairs.read_text().splitlines()
    chain.pairs.write_text("\n".join([rows[0], '{"prompt": "torn', *rows[1:]]) + "\n")

    lin = dragon.lineage(chain.dpo)
    assert {n.key for n in lin.nodes} == whole
    assert lin.focus_node.state == "present"
