"""The Monitor's triage panel (ui/triage_panel.py) on real failed runs of the fake trainer: the
kind in words, one button per fix, and a button that starts the fixed run and selects it."""

from __future__ import annotations

import pytest
from test_triage import failed_run as failed

import dragonfarm_core as dragon
from dragonfarm_core.rundir import files
from ui import triage_panel


@pytest.mark.slow
def test_a_succeeded_run_or_none_shows_no_panel(runs_root, sft_data, model_dir):
    run = dragon.train(sft_data, str(model_dir), runs_dir=runs_root, wait=True)
    for picked in (None, str(run.dir)):
        text, *buttons = triage_panel.view(picked, runs_root)
        assert text == "" and all(b["visible"] is False for b in buttons)


@pytest.mark.slow
def test_an_out_of_memory_run_offers_its_fixes_and_a_button_starts_one(
    runs_root, sft_data, model_dir, monkeypatch
):
    run = failed(runs_root, sft_data, model_dir, monkeypatch, batch_size=4, grad_accum=1)
    files.update_status(run.dir, reason="out_of_memory", error="CUDA out of memory.")
    text, *buttons = triage_panel.view(str(run.dir), runs_root)
    assert "data-kind='out_of_memory'" in text and "ran out of memory" in text
    shown = [b["value"] for b in buttons if b["visible"]]
    assert shown[0] == "Batch size 2, gradient accumulation 2"
    selected, message = triage_panel.apply(str(run.dir), 0, runs_root)
    new = dragon.Run(selected)
    assert new.dir != run.dir and new.config["args"]["batch_size"] == 2
    assert f"Started run {new.id} with: Batch size 2" in message
    assert new.wait(timeout=30).status()["state"] == "succeeded"


@pytest.mark.slow
def test_a_run_outside_the_runs_dir_shows_nothing_and_starts_nothing(
    runs_root, sft_data, model_dir, monkeypatch, tmp_path
):
    run = failed(runs_root, sft_data, model_dir, monkeypatch, batch_size=4, grad_accum=1)
    other = tmp_path / "elsewhere"
    other.mkdir()
    text, *_ = triage_panel.view(str(run.dir), other)
    assert text == ""
    before = sorted(p.name for p in runs_root.iterdir())
    selected, message = triage_panel.apply(str(run.dir), 0, other)
    assert "outside" in message.lower() or "not in" in message.lower(), message
    assert sorted(p.name for p in runs_root.iterdir()) == before
