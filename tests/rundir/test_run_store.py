"""The runs table, and archive / unarchive / delete with the manual's refusals."""

from __future__ import annotations

import os

import psutil
import pytest

from dragonfarm_core.rundir import files, store
from dragonfarm_core.rundir.create import create_run
from dragonfarm_core.rundir.run import Run
from dragonfarm_core.training.train import train


def _finished(
    path, loss=None, started="2026-09-14T10:15:00+00:00", finished="2026-09-14T10:16:30+00:00"
):
    files.adapter_dir(path).mkdir()
    files.update_status(
        path,
        state="succeeded",
        started_at=started,
        finished_at=finished,
        metrics={"train_loss": loss} if loss is not None else {},
    )
    return Run(path)


def _pretend_running(path):
    """A status naming a live process (this one), without starting a trainer."""
    me = psutil.Process()
    files.update_status(path, state="running", pid=os.getpid(), pid_create_time=me.create_time())


def _tree(path):
    return sorted(
        (str(p.relative_to(path)), p.read_bytes() if p.is_file() else b"") for p in path.rglob("*")
    )


def test_runs_table_newest_first(runs_root, sft_data, model_dir):
    first = _finished(
        create_run("sft", sft_data, str(model_dir), name="a", runs_dir=runs_root), loss=0.5
    )
    files.append_progress(first.dir, {"step": 1, "loss": 9.0})
    files.write_config(first.dir, {**first.config, "created_at": "2026-01-01T00:00:00+00:00"})
    second = create_run("sft", sft_data, first, name="b", runs_dir=runs_root)
    files.append_progress(second, {"step": 5, "loss": 1.25})
    table = store.runs(runs_root)
    assert list(table.columns) == store.COLUMNS
    assert list(table["id"]) == [second.name, first.dir.name]
    row = table.iloc[1]
    assert (row["name"], row["state"], row["method"]) == ("a", "succeeded", "sft")
    assert row["model"] == str(model_dir) and row["duration"] == 90.0
    assert row["final_loss"] == 0.5 and str(row["started"]).startswith("2026-09-14 10:15:00")
    newer = table.iloc[0]
    assert newer["continued_from"] == first.dir.name and newer["final_loss"] == 1.25
    assert newer["state"] == "queued"


def test_empty_runs_dir_gives_the_columns(runs_root):
    table = store.runs(runs_root)
    assert list(table.columns) == store.COLUMNS and len(table) == 0
    assert list(store.archived_runs(runs_root).columns) == store.COLUMNS


def test_archive_and_unarchive_keep_every_file(runs_root, sft_data, model_dir):
    run = _finished(create_run("sft", sft_data, str(model_dir), runs_dir=runs_root))
    before = _tree(run.dir)
    assert store.archive_run(run) == run.id
    assert run.id not in set(store.runs(runs_root)["id"])
    assert list(store.archived_runs(runs_root)["id"]) == [run.id]
    assert _tree(runs_root / "archived" / run.id) == before
    with pytest.raises(FileNotFoundError):
        store.archive_run(run.id, runs_dir=runs_root)
    assert store.unarchive_run(run.id, runs_dir=runs_root) == run.id
    assert _tree(run.dir) == before
    assert list(store.runs(runs_root)["id"]) == [run.id]


def test_active_runs_are_refused(runs_root, sft_data, model_dir):
    path = create_run("sft", sft_data, str(model_dir), runs_dir=runs_root)
    _pretend_running(path)
    for action in (store.archive_run, store.delete_run):
        with pytest.raises(RuntimeError, match="is running; cancel it first"):
            action(path)
    assert files.is_run_dir(path)


def test_force_cancels_an_active_run_then_deletes_it(
    runs_root, sft_data, model_dir, monkeypatch, wait_for
):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "400")
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.05")
    run = train(sft_data, str(model_dir), runs_dir=runs_root)
    wait_for(lambda: run.state == "running", what="the run to start")
    assert store.delete_run(run, force=True) == run.id
    assert not run.dir.exists()


def test_a_run_others_continue_from_is_protected(runs_root, sft_data, model_dir):
    parent = _finished(create_run("sft", sft_data, str(model_dir), runs_dir=runs_root))
    child = _finished(create_run("sft", sft_data, parent, runs_dir=runs_root))
    with pytest.raises(RuntimeError, match=f"starting point of {child.id}"):
        store.archive_run(parent)
    store.archive_run(child)  # an archived child still loads the parent's adapter
    with pytest.raises(RuntimeError, match=f"starting point of {child.id}"):
        store.delete_run(parent.id, runs_dir=runs_root)
    assert store.archive_run(parent, force=True) == parent.id
    assert set(store.archived_runs(runs_root)["id"]) == {parent.id, child.id}


def test_delete_by_id_finds_archived_runs_too(runs_root, sft_data, model_dir):
    kept = _finished(create_run("sft", sft_data, str(model_dir), name="kept", runs_dir=runs_root))
    gone = _finished(create_run("sft", sft_data, str(model_dir), name="gone", runs_dir=runs_root))
    store.archive_run(gone)
    assert store.delete_run(gone.id, runs_dir=runs_root) == gone.id
    assert len(store.archived_runs(runs_root)) == 0
    assert list(store.runs(runs_root)["id"]) == [kept.id]
    with pytest.raises(FileNotFoundError, match="No run 'nope'"):
        store.delete_run("nope", runs_dir=runs_root)


def test_unarchive_refuses_to_overwrite(runs_root, sft_data, model_dir):
    run = _finished(create_run("sft", sft_data, str(model_dir), runs_dir=runs_root))
    store.archive_run(run)
    run.dir.mkdir()
    with pytest.raises(FileExistsError, match="already exists"):
        store.unarchive_run(run.id, runs_dir=runs_root)
    with pytest.raises(FileNotFoundError, match="No archived run"):
        store.unarchive_run("missing", runs_dir=runs_root)
