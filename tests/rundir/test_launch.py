"""The trainer subprocess: spawned detached, outlives its caller, reported failed when killed,
cancelled politely or by force, and every escape from the trainer ends as failed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dragonfarm_core.rundir import files, jobs, launch
from dragonfarm_core.rundir.create import create_run
from dragonfarm_core.rundir.run import Run, RunFailedError
from dragonfarm_core.training.train import train

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_train_returns_at_once_and_the_run_succeeds(runs_root, sft_data, model_dir, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.1")
    run = train(sft_data, str(model_dir), runs_dir=runs_root)
    assert run.state in ("queued", "running")  # six steps of 0.1 s cannot be over yet
    status = run.status()
    assert status["pid"] > 0 and status["pid_create_time"] > 0
    assert run.wait(poll=0.05) is run
    assert run.state == "succeeded"
    assert (run.dir / "adapter" / "adapter_config.json").is_file()
    assert list(run.progress()["step"]) == [1, 2, 3, 4, 5, 6]
    log = run.logs(200)
    assert log[0].startswith("[dragonfarm]") and "dragonfarm_core.trainers" in log[0]
    assert log[-1] == "done"


def test_the_command_is_an_argv_list_in_its_own_session(runs_root, sft_data, model_dir):
    path = create_run("sft", sft_data, str(model_dir), runs_dir=runs_root)
    assert launch.trainer_command(path) == [
        sys.executable,
        "-m",
        "dragonfarm_core.trainers",
        str(path),
    ]
    pid = launch.start_run(path)
    assert os.getpgid(pid) == pid  # its own process group: cancel can stop all of it
    Run(path).wait(poll=0.05)


LAUNCHER = """
import sys
from dragonfarm_core.rundir import launch
launch.start_run(sys.argv[1])
"""


@pytest.mark.slow
def test_the_run_outlives_the_process_that_started_it(
    runs_root, sft_data, model_dir, monkeypatch, wait_for
):
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.2")
    path = create_run("sft", sft_data, str(model_dir), runs_dir=runs_root)
    subprocess.run(
        [sys.executable, "-c", LAUNCHER, str(path)],
        check=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.environ["PYTHONPATH"] + os.pathsep + str(ROOT)},
    )
    assert Run(path).state in ("queued", "running")  # the launcher has exited already
    wait_for(lambda: Run(path).state == "succeeded", what="the orphaned run to finish")


def test_a_killed_trainer_is_reported_failed_with_the_log_tail(
    runs_root, sft_data, model_dir, monkeypatch, wait_for
):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "500")
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.05")
    run = train(sft_data, str(model_dir), runs_dir=runs_root)
    wait_for(lambda: (run.status().get("step") or 0) >= 2, what="two steps")
    status = files.read_status(run.dir)
    os.killpg(status["pid"], signal.SIGKILL)
    wait_for(lambda: not launch.process_alive(status), what="the kill")
    assert files.read_status(run.dir)["state"] == "running"  # what the dead trainer left
    seen = run.status()
    assert seen["state"] == "failed" and seen["reason"] == "interrupted"
    assert "is gone" in seen["error"] and "resume" in seen["error"]
    assert any(line.startswith("step ") for line in seen["log_tail"])
    assert Run(run.dir).status() == seen  # every reader, at every read, agrees
    assert files.read_status(run.dir)["state"] == "running"  # and reading wrote nothing
    with pytest.raises(RunFailedError, match="interrupted"):
        run.wait(poll=0.05)


@pytest.mark.slow
def test_cancel_stops_after_the_current_step(runs_root, sft_data, model_dir, monkeypatch, wait_for):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "500")
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.05")
    run = train(sft_data, str(model_dir), runs_dir=runs_root)
    wait_for(lambda: (run.status().get("step") or 0) >= 3, what="three steps")
    assert run.cancel(timeout=30) is run
    status = run.status()
    assert status["state"] == "cancelled", (status, run.logs())
    assert not launch.process_alive(status)
    assert files.checkpoints(run.dir), "a cooperative cancel keeps a checkpoint"
    assert not files.cancel_requested(run.dir)


@pytest.mark.slow
def test_cancel_kills_the_group_of_a_trainer_that_does_not_stop(
    runs_root, sft_data, model_dir, monkeypatch, wait_for
):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "500")
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.05")
    monkeypatch.setenv("FAKE_TRAINER_IGNORE_CANCEL", "1")
    monkeypatch.setenv("FAKE_TRAINER_IGNORE_TERM", "1")
    monkeypatch.setattr(jobs, "KILL_GRACE_S", 0.3)
    run = train(sft_data, str(model_dir), runs_dir=runs_root)
    wait_for(lambda: (run.status().get("step") or 0) >= 1, what="a step")
    before = files.read_status(run.dir)
    run.cancel(timeout=0.3)
    assert run.state == "cancelled"
    assert not launch.process_alive(before)
    assert any("killing its process group" in line for line in run.logs())


def test_an_exception_in_the_trainer_ends_as_failed(runs_root, sft_data, model_dir, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_FAIL_AT", "2")
    run = train(sft_data, str(model_dir), runs_dir=runs_root)
    with pytest.raises(RunFailedError) as caught:
        run.wait(poll=0.05)
    assert caught.value.state == "failed" and caught.value.reason == "error"
    assert "fake failure at step 2" in str(caught.value)
    assert any("Traceback" in line for line in caught.value.log_tail)
    assert run.status()["error"] == "RuntimeError: fake failure at step 2"


def test_a_trainer_that_returns_without_a_final_state_ends_failed(
    runs_root, sft_data, model_dir, monkeypatch
):
    monkeypatch.setenv("FAKE_TRAINER_NO_FINAL", "1")
    run = train(sft_data, str(model_dir), runs_dir=runs_root)
    with pytest.raises(RunFailedError, match="returned without writing a final state"):
        run.wait(poll=0.05)


def test_a_missing_trainer_module_ends_failed(runs_root, sft_data, model_dir, monkeypatch):
    monkeypatch.setenv("DRAGONFARM_TRAINER_MODULE", "no_such_trainer_module")
    run = train(sft_data, str(model_dir), runs_dir=runs_root)
    with pytest.raises(RunFailedError, match="ModuleNotFoundError"):
        run.wait(poll=0.05)


def test_start_refuses_a_run_that_is_already_active(runs_root, sft_data, model_dir, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "500")
    run = train(sft_data, str(model_dir), runs_dir=runs_root)
    with pytest.raises(RuntimeError, match="already (queued|running)"):
        launch.start_run(run.dir)
    run.cancel(timeout=10)


def test_a_queued_run_that_never_started_is_reported(runs_root, sft_data, model_dir, monkeypatch):
    path = create_run("sft", sft_data, str(model_dir), runs_dir=runs_root)
    assert Run(path).state == "queued"  # just written: its launcher may be spawning it
    monkeypatch.setattr(jobs, "STARTUP_GRACE_S", 0)
    status = Run(path).status()
    assert status["state"] == "failed" and "never started" in status["error"]


def test_a_bad_max_concurrent_is_refused_before_anything_is_written(
    runs_root, sft_data, model_dir, monkeypatch
):
    monkeypatch.setenv("DRAGONFARM_MAX_CONCURRENT", "zero")
    with pytest.raises(ValueError, match="DRAGONFARM_MAX_CONCURRENT"):
        train(sft_data, str(model_dir), runs_dir=runs_root)
    assert list(runs_root.iterdir()) == []


def test_the_entry_point_refuses_a_folder_that_is_not_a_run(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "dragonfarm_core.trainers", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 2 and "usage" in done.stderr


def test_cancelling_a_run_that_was_never_started(runs_root, sft_data, model_dir):
    run = Run(create_run("sft", sft_data, str(model_dir), runs_dir=runs_root))
    assert run.cancel(timeout=5).state == "cancelled"
