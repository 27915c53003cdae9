"""Background pipelines (a job that outlives its caller) and stopping them: cancel between
steps (a judge step finishes first), cancel during a training step (its run keeps a
checkpoint, and resume_pipeline continues that run from it), a killed runner reported failed
with its log tail and then resumed."""

from __future__ import annotations

import json
import os
import signal

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.rundir import files, jobs, pipeline_record
from tests.pipelines.judges import as_function, first_sample_best

SLOW = {"FAKE_TRAINER_STEPS": "60", "FAKE_TRAINER_STEP_S": "0.05", "FAKE_TRAINER_SAVE_EVERY": "5"}


@pytest.fixture
def slow_trainer(monkeypatch):
    for k, v in SLOW.items():
        monkeypatch.setenv(k, v)


def _training(p, wait_for, index=0):
    """The run of step `index` once it is training (past its first checkpoint)."""

    def started():
        entry = pipeline_record.read(p.path)["steps"][index]
        return bool(entry["run_dir"]) and files.checkpoints(entry["run_dir"]) != []

    wait_for(started, timeout=60, what=f"step {index + 1} to train")
    return dragon.open_run(pipeline_record.read(p.path)["steps"][index]["run_dir"])


@pytest.mark.slow
def test_cancel_between_steps_lets_a_judge_step_finish(runs_root, model_dir, sft_data,
                                                       pairs_data, backend):  # fmt: skip
    asked = []

    def judge(questions):
        if not asked:  # while the judge step runs, someone asks the pipeline to stop
            (path,) = (runs_root / files.PIPELINES_DIR).glob("*.json")
            dragon.pipeline_cancel(path, wait=False)
        asked.extend(questions)
        return as_function(first_sample_best)(questions)

    p = dragon.pipeline(str(model_dir), [dragon.steps.train(sft_data),
                        dragon.steps.judge(judge=judge, n=2, against="base"),
                        dragon.steps.prefer(pairs_data)], runs_dir=runs_root)  # fmt: skip
    record = p.status()
    assert record["status"] == "cancelled"
    assert [s["state"] for s in record["steps"]] == ["succeeded", "succeeded", "pending"]
    judged = record["steps"][1]["summary"]
    assert judged["wins"] == judged["n"] >= 1 and len(asked) == 2 * judged["n"]  # it finished
    assert len(p.runs) == 1
    # Resumed, it goes on from the step that never ran.
    again = dragon.resume_pipeline(p)
    assert again.status()["status"] == "succeeded" and len(again.runs) == 2


@pytest.mark.slow
def test_a_background_pipeline_cancelled_during_training_then_resumed_from_its_checkpoint(
    runs_root, model_dir, sft_data, pairs_data, slow_trainer, wait_for
):
    p = dragon.pipeline(str(model_dir), [dragon.steps.train(sft_data),
                        dragon.steps.prefer(pairs_data)], runs_dir=runs_root,
                        background=True)  # fmt: skip
    assert p.state in ("queued", "running")  # returned at once
    run = _training(p, wait_for)
    record = dragon.pipeline_cancel(p, timeout=60)
    assert record["status"] == "cancelled"
    assert [s["state"] for s in record["steps"]] == ["cancelled", "pending"]
    assert run.state == "cancelled" and files.checkpoints(run.dir)  # stopped as cancel() does
    stopped_at = run.status()["step"]
    assert 0 < stopped_at < 60
    assert pipeline_record.job(p.path).state == "cancelled"
    assert "cancelling run" in "\n".join(p.logs())

    for k in SLOW:
        os.environ.pop(k)  # the rest trains at the stand-in's usual speed
    dragon.resume_pipeline(p.id, runs_dir=runs_root)
    record = p.wait(timeout=60)
    assert record["status"] == "succeeded"
    assert p.runs[0] == run and len(p.runs) == 2  # the same run, continued
    assert "Resuming from checkpoint-" in "\n".join(run.logs(200))
    assert run.state == "succeeded" and run.progress()["step"].is_unique  # no step twice


@pytest.mark.slow
def test_a_killed_runner_is_reported_failed_with_its_log_tail_and_resumed(
    runs_root, model_dir, sft_data, pairs_data, slow_trainer, wait_for
):
    p = dragon.pipeline(str(model_dir), [dragon.steps.train(sft_data),
                        dragon.steps.prefer(pairs_data)], runs_dir=runs_root,
                        background=True)  # fmt: skip
    run = _training(p, wait_for)
    os.kill(pipeline_record.read(p.path)["pid"], signal.SIGKILL)
    wait_for(lambda: p.state == "failed", timeout=30, what="the pipeline to be seen dead")
    record = dragon.pipeline_status(p)
    assert "is gone but the pipeline was still running" in record["error"]
    assert any("step 1 (train) trains run" in line for line in record["log_tail"])
    assert [s["state"] for s in record["steps"]] == ["failed", "pending"]
    assert json.loads(p.path.read_text())["status"] == "failed"  # written back for every reader

    resumed = dragon.resume_pipeline(p)
    record = resumed.wait(timeout=90)
    assert record["status"] == "succeeded", record
    assert p.runs[0] == run and run.state == "succeeded" and len(p.runs) == 2
    assert p.runs[1].config["continued_from"] == str(run.dir)


@pytest.mark.slow
def test_a_pipeline_that_does_not_stop_is_killed_after_the_timeout(
    runs_root, model_dir, sft_data, slow_trainer, monkeypatch, wait_for
):
    monkeypatch.setenv("FAKE_TRAINER_IGNORE_CANCEL", "1")  # its run never stops when asked
    p = dragon.pipeline(str(model_dir), [dragon.steps.train(sft_data)], runs_dir=runs_root,
                        background=True)  # fmt: skip
    run = _training(p, wait_for)
    record = dragon.pipeline_cancel(p, timeout=1)
    assert record["status"] == "cancelled" and "did not stop within 1 s" in record["error"]
    assert record["steps"][0]["state"] == "cancelled"
    job = pipeline_record.job(p.path)
    assert not jobs.process_alive(files.read_status(job.dir))  # the pipeline's process is gone
    assert run.state not in files.ACTIVE_STATES  # and so is its trainer
    assert p.state == "cancelled"  # as every later reader sees it


def test_resume_takes_the_steps_again_when_one_is_a_python_function(
    runs_root, model_dir, sft_data, backend
):
    def broken(questions):
        raise RuntimeError("judge down")

    steps = [dragon.steps.train(sft_data), dragon.steps.judge(judge=broken, n=1)]
    with pytest.raises(RuntimeError, match="judge down"):
        dragon.pipeline(str(model_dir), steps, runs_dir=runs_root)
    (path,) = (runs_root / files.PIPELINES_DIR).glob("*.json")
    assert [s["state"] for s in dragon.pipeline_status(path)["steps"]] == ["succeeded", "failed"]
    with pytest.raises(ValueError, match=r"Step 2 \(judge\) cannot be made again: A function"):
        dragon.resume_pipeline(path)
    with pytest.raises(ValueError, match="must be the steps"):
        dragon.resume_pipeline(path, steps=steps[:1])
    steps[1] = dragon.steps.judge(judge=as_function(first_sample_best), n=1)
    p = dragon.resume_pipeline(path, steps=steps)
    record = p.status()
    assert record["status"] == "succeeded" and record["error"] is None
    assert len(p.runs) == 1 and record["steps"][1]["summary"]["wins"] == 1


def test_a_foreground_pipeline_whose_session_died_is_reported_failed(runs_root, model_dir):
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    path = pipeline_record.create(runs_root, "lost", str(model_dir), [{"kind": "merge"}], False)
    pipeline_record.update(path, status="running", pid=int(gone.stdout), pid_create_time=1.0)
    pipeline_record.update_step(path, 0, state="running")
    record = dragon.pipeline_status(path)
    assert record["status"] == "failed" and "is gone but the pipeline was still running" in (
        record["error"])  # fmt: skip
    assert record["steps"][0]["state"] == "failed"
