"""Monitor tab handlers: what a run shows, ticks that read only after a change (or when a live
run is due a liveness check), cancel and resume, the run picker.

Trainer processes run tests/fake_trainer.py (the `runs_dir` fixture in conftest.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import gradio as gr
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.rundir import create, files
from ui import present, watch
from ui.tabs import monitor

SKIP = gr.skip()
SAMPLES = [{"prompt": "Device 1 reboots", "reference": "Reset it (1).", "generated": "Reset it."}]


@pytest.fixture
def model(tmp_path: Path) -> str:
    folder = tmp_path / "models" / "Tiny-Model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return str(folder)


def view(out: tuple) -> dict:
    names = [
        "header",
        "bar",
        "chart",
        "log",
        "samples",
        "code",
        "cancel",
        "resume",
        "error",
        "outcome",
    ]
    return dict(zip([*names, "seen"], out, strict=True))


def settled(version, quiet_s: float = 0.3) -> int:
    """A change counter once no event has come for `quiet_s` (events arrive from a thread)."""
    last, since = version(), time.monotonic()
    while time.monotonic() - since < quiet_s:
        time.sleep(0.05)
        if version() != last:
            last, since = version(), time.monotonic()
    return last


def until(predicate, timeout: float = 20) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def test_nothing_selected_says_where_to_start(tmp_path: Path):
    shown = view(monitor.show(None, runs_dir=tmp_path))
    assert monitor.NO_RUN in shown["header"]
    assert shown["cancel"]["interactive"] is False and shown["resume"]["interactive"] is False
    assert shown["samples"]["visible"] is False


@pytest.mark.slow
def test_a_finished_run_shows_its_curve_log_samples_and_code(mapped, model, runs_dir: Path):
    run = dragon.train(mapped, model, runs_dir=runs_dir, wait=True)
    files.write_samples(run.dir, SAMPLES)  # the real trainer writes these; the fake one does not
    shown = view(monitor.show(str(run.dir), runs_dir=runs_dir))
    assert shown["header"].startswith("**succeeded**") and run.id in shown["header"]
    assert "step 6 / 6 (100%)" in shown["bar"]
    loss = shown["chart"].data[0]
    assert list(loss.x) == [1, 2, 3, 4, 5, 6] and loss.y[-1] == pytest.approx(2 / 6)
    assert "done" in shown["log"]
    assert shown["samples"]["visible"] is True
    assert shown["samples"]["value"].to_dict("records") == SAMPLES
    assert shown["code"] == present.portable_code(dragon.code(run))
    assert shown["cancel"]["interactive"] is False and shown["resume"]["interactive"] is False
    seen = shown["seen"]
    assert seen.run == str(run.dir) and seen.active is False


@pytest.mark.slow
def test_a_tick_reads_nothing_until_the_run_changes(mapped, model, runs_dir: Path):
    run = dragon.train(mapped, model, runs_dir=runs_dir, wait=True)
    watch.run_version(run.dir)  # watching starts here: the trainer's writes are all done
    seen = view(monitor.show(str(run.dir), runs_dir=runs_dir))["seen"]
    time.sleep(0.3)
    assert monitor.tick(str(run.dir), seen, runs_dir=runs_dir) == (SKIP,) * monitor.N_VIEW
    files.append_progress(run.dir, {"step": 7, "loss": 0.1})
    until(lambda: watch.run_version(run.dir) != seen.version)
    shown = view(monitor.tick(str(run.dir), seen, runs_dir=runs_dir))
    assert list(shown["chart"].data[0].x)[-1] == 7
    # Another run picked: read at once, whatever the counters say.
    assert monitor.tick(None, shown["seen"], runs_dir=runs_dir)[0] != SKIP


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


def test_a_dead_trainer_is_noticed_on_the_liveness_interval(mapped, model, runs_dir: Path):
    run_dir = create.create_run("sft", mapped, model, runs_dir=runs_dir)
    files.update_status(run_dir, state="running", pid=_dead_pid(), pid_create_time=1.0)
    version = watch.run_version(run_dir)
    fresh = monitor.Seen(str(run_dir), version, time.monotonic(), active=True)
    assert monitor.tick(str(run_dir), fresh, runs_dir=runs_dir) == (SKIP,) * monitor.N_VIEW
    due = monitor.Seen(str(run_dir), version, time.monotonic() - monitor.LIVENESS_S, active=True)
    shown = view(monitor.tick(str(run_dir), due, runs_dir=runs_dir))
    assert shown["header"].startswith("**failed**") and "interrupted" in shown["header"]
    assert shown["resume"]["interactive"] is True and shown["seen"].active is False


@pytest.mark.slow
def test_cancel_then_resume(mapped, model, runs_dir: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "400")
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.05")
    monkeypatch.setenv("FAKE_TRAINER_SAVE_EVERY", "1000")  # the cancel saves one
    run = dragon.train(mapped, model, runs_dir=runs_dir)
    until(lambda: (run.status().get("step") or 0) >= 2)
    assert view(monitor.show(str(run.dir), runs_dir=runs_dir))["cancel"]["interactive"] is True
    shown = view(monitor.cancel(str(run.dir), runs_dir=runs_dir))
    assert shown["header"].startswith("**cancelled**") and shown["error"] == ""
    assert shown["resume"]["interactive"] is True and shown["cancel"]["interactive"] is False

    monkeypatch.setenv("FAKE_TRAINER_STEPS", "8")  # a short rest after the checkpoint
    shown = view(monitor.resume(str(run.dir), runs_dir=runs_dir))
    assert shown["error"] == "" and shown["header"].split("**")[1] in ("queued", "running")
    run.wait(timeout=30)
    with pytest.warns(UserWarning):
        refused = view(monitor.resume(str(run.dir), runs_dir=runs_dir))
    assert "already succeeded" in refused["error"]


def test_a_run_that_went_away_says_so(runs_dir: Path):
    shown = view(monitor.show(str(runs_dir / "20260101-000000-gone"), runs_dir=runs_dir))
    assert "is gone (archived or deleted)" in shown["header"]


def test_the_picker_lists_runs_newest_first_and_defaults_to_the_newest(
    mapped, model, runs_dir: Path
):
    update, seen = monitor.refresh_choices(runs_dir, None, None)
    assert update["choices"] == [] and update["value"] is None
    first = create.create_run("sft", mapped, model, runs_dir=runs_dir, name="first")
    second = create.create_run("sft", mapped, model, runs_dir=runs_dir, name="second")
    settled(lambda: watch.runs_version(runs_dir))
    update, seen = monitor.refresh_choices(runs_dir, seen, None)
    assert [value for _, value in update["choices"]] == [str(second), str(first)]
    assert update["value"] == str(second)
    assert monitor.refresh_choices(runs_dir, seen, str(first)) == (SKIP, SKIP)
    assert monitor.select(runs_dir, str(first))["value"] == str(first)
    assert monitor.pick(str(first), runs_dir=runs_dir) == str(first)


@pytest.mark.slow
def test_a_grpo_run_shows_its_reward_curves(tickets, model, runs_dir: Path):
    prompts = tickets.map_prompts(prompt="question", reference="answer")
    rewards = [dragon.reward("contains"), dragon.reward("length", max_chars=40, name="short")]
    run = dragon.reinforce(prompts, model, rewards, group_size=2, max_new_tokens=16,
                           runs_dir=runs_dir, wait=True)  # fmt: skip
    # The real trainer writes these columns (the fake one writes an SFT-like row).
    for step in (7, 8):
        files.append_progress(
            run.dir, {"step": step, "loss": 0.0, "reward": step / 10, "reward_contains": 0.5,
                      "reward_short": step / 20, "kl": 0.01 * step, "lr": 1e-5},
        )  # fmt: skip
    chart = view(monitor.show(str(run.dir), runs_dir=runs_dir))["chart"]
    curves = {trace.name: (list(trace.x), list(trace.y)) for trace in chart.data}
    assert curves["reward (total)"] == ([1, 2, 3, 4, 5, 6, 7, 8], [0.5] * 6 + [0.7, 0.8])
    assert curves["contains reward"] == ([7, 8], [0.5, 0.5])
    assert curves["short reward"] == ([7, 8], [0.35, 0.4])
    assert curves["KL to the start model"] == ([7, 8], [0.07, 0.08])
    assert "preference accuracy" not in curves
