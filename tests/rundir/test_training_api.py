"""train() continuing from a run, resume(), and the module-level status/progress/logs/wait/cancel."""

from __future__ import annotations

import pytest

from dragonfarm_core.rundir import files
from dragonfarm_core.rundir.run import RunFailedError
from dragonfarm_core.training import train as training
from dragonfarm_core.training.train import resume, train


@pytest.mark.slow
def test_training_on_top_of_a_finished_run(runs_root, sft_data, model_dir):
    first = train(sft_data, str(model_dir), runs_dir=runs_root, wait=True)
    second = train(sft_data, first, runs_dir=runs_root)
    assert second.config["continued_from"] == str(first.dir)
    assert second.config["model"]["adapters"] == [str(first.dir / "adapter")]
    assert second.wait(poll=0.05).state == "succeeded"


def test_training_on_an_unfinished_run_is_refused(runs_root, sft_data, model_dir, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "400")
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.05")
    busy = train(sft_data, str(model_dir), runs_dir=runs_root)
    with pytest.raises(ValueError, match="only a succeeded run can be continued from"):
        train(sft_data, busy, runs_dir=runs_root)
    assert [p for p in runs_root.iterdir() if files.is_run_dir(p)] == [busy.dir]
    busy.cancel(timeout=10)


@pytest.mark.slow
def test_resume_continues_a_cancelled_run_from_its_checkpoint(
    runs_root, sft_data, model_dir, monkeypatch, wait_for, capsys
):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "12")
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.1")
    run = train(sft_data, str(model_dir), runs_dir=runs_root)
    wait_for(lambda: (run.status().get("step") or 0) >= 3, what="three steps")
    run.cancel(timeout=10)
    assert run.state == "cancelled" and files.checkpoints(run.dir)
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.01")
    assert resume(run, wait=True) is run
    assert "Resuming run" in capsys.readouterr().out
    assert run.state == "succeeded"
    assert list(run.progress()["step"]) == list(range(1, 13))  # no gap, no repeat
    assert any(line.startswith("Resuming from checkpoint-") for line in run.logs(100))


@pytest.mark.slow
def test_resume_without_a_checkpoint_starts_over(
    runs_root, sft_data, model_dir, monkeypatch, capsys
):
    monkeypatch.setenv("FAKE_TRAINER_FAIL_AT", "2")
    monkeypatch.setenv("FAKE_TRAINER_SAVE_EVERY", "100")
    run = train(sft_data, str(model_dir), runs_dir=runs_root)
    with pytest.raises(RunFailedError, match="fake failure"):
        run.wait(poll=0.05)
    monkeypatch.delenv("FAKE_TRAINER_FAIL_AT")
    resume(run.dir, wait=True)
    assert "no checkpoint to resume from; it starts over" in capsys.readouterr().out
    assert list(run.progress()["step"]) == [1, 2, 3, 4, 5, 6]
    status = run.status()
    assert status["state"] == "succeeded" and status["resumed_from"] is None


@pytest.mark.slow
def test_resume_refuses_active_and_succeeded_runs(runs_root, sft_data, model_dir, monkeypatch):
    done = train(sft_data, str(model_dir), runs_dir=runs_root, wait=True)
    with pytest.raises(RuntimeError, match="already succeeded.*model=run"):
        resume(done)
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "400")
    busy = train(sft_data, str(model_dir), runs_dir=runs_root)
    with pytest.raises(RuntimeError, match="needs no resuming"):
        resume(busy)
    busy.cancel(timeout=10)


def test_module_functions_take_a_run_or_its_directory(runs_root, sft_data, model_dir):
    run = train(sft_data, str(model_dir), runs_dir=runs_root)
    assert training.wait(str(run.dir), poll=0.05) == run
    assert training.status(run)["state"] == "succeeded"
    assert list(training.progress(str(run.dir))["step"]) == [1, 2, 3, 4, 5, 6]
    assert training.logs(run, n=1) == ["done"]
    assert training.cancel(run.dir).state == "succeeded"  # nothing left to cancel
