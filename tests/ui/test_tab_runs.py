"""Runs tab handlers: the tables, open, archive / unarchive / delete with their confirmation,
and the refusals (a running run; a run another run continues from, where force is offered).

Runs are written with `create_run` and their status set directly: no trainer process needed.
"""

from __future__ import annotations

import html
import json
import os
import time
from pathlib import Path

import gradio as gr
import pandas as pd
import psutil
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.rundir import create, files, location
from dragonfarm_core.rundir.run import Run
from ui import present, table_widths, watch
from ui.tabs import runs

SKIP = gr.skip()


@pytest.fixture
def runs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv(location.ENV_VAR, raising=False)
    monkeypatch.setattr(location, "_configured", None)
    root = tmp_path / "runs"
    root.mkdir()
    return root


@pytest.fixture
def make_run(tmp_path: Path, runs_dir: Path):
    """make_run(name, state, model=None) -> run folder, without starting any process."""
    folder = tmp_path / "models" / "Tiny-Model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    rows = [{"question": f"Device {i} reboots", "answer": f"Reset it ({i})."} for i in range(24)]
    pd.DataFrame(rows).to_csv(tmp_path / "tickets.csv", index=False)
    mapped = dragon.dataset(tmp_path / "tickets.csv").map(prompt="question", response="answer")

    def make(name: str, state: str, model: object = None) -> Path:
        path = create.create_run("sft", mapped, model or str(folder), runs_dir=runs_dir, name=name)
        started = {
            "started_at": "2026-09-14T10:00:00+00:00",
            "finished_at": "2026-09-14T10:03:05+00:00",
        }
        if state == "running":  # this test process stands in for a live trainer
            me = psutil.Process(os.getpid())
            files.update_status(
                path, state=state, pid=me.pid, pid_create_time=me.create_time(), **started
            )
        else:
            files.update_status(path, state=state, metrics={"train_loss": 0.123456}, **started)
            files.adapter_dir(path).mkdir()
        return path

    return make


def listing(runs_dir: Path, chosen: str | None = None, archived: str | None = None) -> dict:
    """The tables' frames (each comes with its column widths) and the pickers' updates."""
    names = ["table", "chosen", "archived_table", "archived"]
    shown = dict(zip(names, runs.tables(runs_dir, chosen, archived), strict=True))
    return {**shown, "table": shown["table"]["value"],
            "archived_table": shown["archived_table"]["value"]}  # fmt: skip


def outcome(out: tuple) -> dict:
    shown = dict(zip(["message", "force", "confirm", "code"], out, strict=True))
    return {**shown, "message": html.unescape(shown["message"])}


def test_the_tables_list_runs_and_archived_runs(make_run, runs_dir: Path):
    done = make_run("done", "succeeded")
    shown = listing(runs_dir, chosen=done.name)
    row = shown["table"].iloc[0].to_dict()
    assert row["id"] == done.name and row["state"] == "succeeded"
    assert row["duration"] == "3 min 05 s" and row["final loss"] == "0.1235"
    assert shown["chosen"]["choices"] == [done.name] and shown["chosen"]["value"] == done.name
    assert shown["archived_table"].empty and shown["archived"]["choices"] == []
    assert list(shown["table"].columns) == list(present.runs_table(dragon.runs(runs_dir)).columns)


def test_open_selects_the_run_for_the_monitor(make_run, runs_dir: Path):
    done = make_run("done", "succeeded")
    selected, message = runs.open_in_monitor(done.name, runs_dir)
    assert selected == str(done) and "Monitor" in message
    assert runs.open_in_monitor(None, runs_dir)[0] == SKIP


def test_archive_and_unarchive(make_run, runs_dir: Path):
    done = make_run("done", "succeeded")
    out = outcome(runs.archive(done.name, False, runs_dir))
    assert "Archived" in out["message"] and out["confirm"] is False
    assert f'dragon.archive_run("{done.name}", runs_dir="{runs_dir}")' in out["code"]
    shown = listing(runs_dir, chosen=done.name)
    assert shown["table"].empty and shown["chosen"]["value"] is None
    assert shown["archived"]["choices"] == [done.name]
    out = outcome(runs.unarchive(done.name, runs_dir))
    assert "Unarchived" in out["message"] and files.is_run_dir(done)
    assert "dragon.unarchive_run(" in out["code"]


def test_delete_needs_the_confirmation(make_run, runs_dir: Path):
    done = make_run("done", "succeeded")
    out = outcome(runs.delete(done.name, False, False, runs_dir))
    assert "Tick 'I understand'" in out["message"] and files.is_run_dir(done)
    out = outcome(runs.delete(done.name, True, False, runs_dir))
    assert "Deleted" in out["message"] and not done.exists()
    assert out["confirm"] is False  # the next delete asks again


def test_a_running_run_is_refused_without_offering_force(make_run, runs_dir: Path):
    live = make_run("live", "running")
    with pytest.warns(UserWarning):
        out = outcome(runs.archive(live.name, False, runs_dir))
    assert "is running; cancel it first" in out["message"]
    assert out["force"]["visible"] is False and files.is_run_dir(live)
    with pytest.warns(UserWarning):
        out = outcome(runs.delete(live.name, True, False, runs_dir))
    assert "is running" in out["message"] and files.is_run_dir(live)


def test_a_parent_run_is_refused_and_force_is_offered(make_run, runs_dir: Path):
    parent = make_run("parent", "succeeded")
    child = make_run("child", "succeeded", model=Run(parent))
    with pytest.warns(UserWarning):
        out = outcome(runs.archive(parent.name, False, runs_dir))
    assert f"is the starting point of {child.name}" in out["message"]
    assert out["force"]["visible"] is True
    with pytest.warns(UserWarning):
        out = outcome(runs.delete(parent.name, True, False, runs_dir))
    assert out["force"]["visible"] is True and files.is_run_dir(parent)
    out = outcome(runs.archive(parent.name, True, runs_dir))
    assert "Archived" in out["message"] and out["force"] == {
        "__type__": "update",
        "value": False,
        "visible": False,
    }
    assert "force=True" in out["code"]
    assert runs.no_force() == {"__type__": "update", "value": False, "visible": False}


def test_nothing_picked_says_so(runs_dir: Path):
    with pytest.warns(UserWarning):
        assert "Pick a run" in outcome(runs.archive(None, False, runs_dir))["message"]
    with pytest.warns(UserWarning):
        assert "Pick an archived run" in outcome(runs.unarchive(None, runs_dir))["message"]


def test_a_row_click_picks_the_run():
    event = gr.SelectData(None, {"index": [0, 2], "value": "x", "row_value": ["20260914-r1", "n"]})
    assert runs.pick_row(event) == "20260914-r1"


def test_the_timer_reads_only_when_the_runs_folder_changed(make_run, runs_dir: Path):
    first = runs.refresh(runs_dir, None, None, None)
    seen = first[-1]
    assert first[0]["value"].empty
    assert runs.refresh(runs_dir, seen, None, None) == (SKIP,) * 5
    made = make_run("new", "succeeded")
    end = time.monotonic() + 5
    while watch.runs_version(runs_dir) == seen and time.monotonic() < end:
        time.sleep(0.02)
    later = runs.refresh(runs_dir, seen, None, None)
    assert list(later[0]["value"]["id"]) == [made.name] and later[-1] != seen


def test_every_column_of_the_runs_table_gets_room_for_its_header(make_run, runs_dir: Path):
    """Sized by their cells, 'continued from' stood one letter a line and 'trained on' was
    off-screen in a 1400 px window (seen in a new user's walk): each table comes with widths
    that fill the table and give each header its longest word."""
    make_run("done", "succeeded")
    for key in (0, 2):  # the runs table and the archived one
        shown = runs.tables(runs_dir, None, None)[key]
        widths = shown["column_widths"]
        assert len(widths) == len(shown["value"].columns) == 10
        assert widths == table_widths.column_widths(shown["value"])
        assert all(str(w).endswith("%") for w in widths)  # all ten fit side by side
        share = dict(zip(shown["value"].columns, widths, strict=True))
        room = table_widths.TABLE_PX * float(share["continued from"].rstrip("%")) / 100
        assert room >= table_widths.CHAR_PX * len("continued")
