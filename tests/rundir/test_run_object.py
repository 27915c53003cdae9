"""The Run object: progress table, logs, wait (success, failure, timeout), repr, open_run."""

from __future__ import annotations

import math

import pytest

from dragonfarm_core.rundir import files
from dragonfarm_core.rundir.create import create_run
from dragonfarm_core.rundir.run import PROGRESS_COLUMNS, Run, RunFailedError, open_run
from dragonfarm_core.training.train import train


@pytest.fixture
def run(runs_root, sft_data, model_dir) -> Run:
    return Run(create_run("sft", sft_data, str(model_dir), runs_dir=runs_root))


def test_progress_has_the_standard_columns_then_extras(run):
    empty = run.progress()
    assert list(empty.columns) == list(PROGRESS_COLUMNS) and len(empty) == 0
    files.append_progress(run.dir, {"step": 1, "loss": 2.5, "lr": 1e-4, "pref_acc": 0.5})
    files.append_progress(run.dir, {"step": 2, "eval_loss": float("nan"), "kl": 0.1})
    with open(run.dir / files.PROGRESS, "a") as f:
        f.write('{"step": 3, "lo')  # a writer killed mid-line
    table = run.progress()
    assert list(table.columns) == [*PROGRESS_COLUMNS, "pref_acc", "kl"]
    assert list(table["step"]) == [1, 2]
    assert table["loss"].iloc[0] == 2.5 and math.isnan(table["loss"].iloc[1])
    assert math.isnan(table["eval_loss"].iloc[1]) and table["kl"].iloc[1] == 0.1


def test_logs_returns_the_last_lines(run):
    files.log_path(run.dir).write_text("".join(f"line {i}\n" for i in range(100)))
    assert run.logs(3) == ["line 97", "line 98", "line 99"]
    assert len(run.logs()) == 50


def test_wait_times_out_and_the_run_keeps_going(runs_root, sft_data, model_dir, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "400")
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.05")
    slow = train(sft_data, str(model_dir), runs_dir=runs_root)
    with pytest.raises(TimeoutError, match="keeps going"):
        slow.wait(timeout=0.3, poll=0.05)
    assert slow.state in ("queued", "running")
    slow.cancel(timeout=10)
    with pytest.raises(RunFailedError, match="was cancelled") as caught:
        slow.wait(poll=0.05)
    assert caught.value.state == "cancelled"


def test_wait_reports_a_failure_with_reason_and_log_tail(run):
    files.log_path(run.dir).write_text("loading\nCUDA out of memory\n")
    files.update_status(
        run.dir,
        state="failed",
        reason="out_of_memory",
        error="CUDA out of memory. Lower batch_size.",
    )
    with pytest.raises(RunFailedError) as caught:
        run.wait(poll=0.01)
    message = str(caught.value)
    assert "failed (out_of_memory): CUDA out of memory. Lower batch_size." in message
    assert message.endswith("loading\nCUDA out of memory")
    assert caught.value.reason == "out_of_memory" and caught.value.run_id == run.id


def test_repr_names_the_run_and_its_state(run):
    files.update_status(run.dir, state="succeeded", step=6, total_steps=6)
    text = repr(run)
    assert run.id in text and "succeeded" in text and "step 6/6" in text


def test_open_run_by_dir_or_id(run, runs_root):
    assert open_run(run.dir) == run
    assert open_run(run.id, runs_dir=runs_root) == run
    assert open_run(run) is run
    with pytest.raises(FileNotFoundError, match="No run 'nope'"):
        open_run("nope", runs_dir=runs_root)
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        open_run(runs_root)
