"""The job runner (rundir/jobs.py) with a stand-in job (tests/fake_job.py): started from an
argv list in its own session, reported failed with its log tail when its process dies, cancelled
by asking or by killing its whole group, queued for a device only when it needs one, reaped."""

from __future__ import annotations

import json
import os
import signal
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from dragonfarm_core.rundir import files, jobs, launch, store
from dragonfarm_core.rundir.create import create_run

FAKE_JOB = str(Path(__file__).resolve().parents[1] / "fake_job.py")


@pytest.fixture
def job(tmp_path: Path) -> jobs.Job:
    folder = tmp_path / "job"
    folder.mkdir()
    return jobs.open_job(folder)


def fake(job: jobs.Job, *options: str) -> list[str]:
    return [sys.executable, FAKE_JOB, str(job.dir), *options]


def gone(pid: int) -> bool:
    """Not running any more: no such process, or a zombie (ended, not reaped yet)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_job_starts_at_once_in_its_own_session_and_succeeds(job, wait_for):
    pid = job.start(fake(job, "--steps", "5", "--step-s", "0.1"), kind="test")
    status = files.read_status(job.dir)
    assert status["state"] in ("queued", "running") and status["pid"] == pid
    assert status["pid_create_time"] > 0 and status["kind"] == "test"
    assert os.getpgid(pid) == pid  # leads its own group: a cancel reaches all it starts
    final = job.wait(timeout=30)
    assert final["state"] == "succeeded" and final["started_at"] and final["finished_at"]
    log = job.logs(20)
    assert log[0].startswith("[dragonfarm]") and "queued:" in log[0] and "fake_job.py" in log[0]
    assert [line for line in log if line.startswith("step ")] == [f"step {i}" for i in range(1, 6)]
    assert job.log == job.dir / files.JOB_LOG


def test_shell_metacharacters_in_an_argument_are_passed_literally(job, tmp_path):
    trap = tmp_path / "pwned"
    tricky = f"; touch {trap} && $(touch {trap}) `touch {trap}` | cat * > {trap} 'x\" $HOME"
    out = tmp_path / "argv.json"
    job.start(fake(job, "--steps", "0", "--argv-out", str(out), "--note", tricky))
    assert job.wait(timeout=30)["state"] == "succeeded"
    assert json.loads(out.read_text())[-1] == tricky  # one argument, exactly as given
    assert not trap.exists()  # no shell ever read it


def test_a_command_line_string_is_refused(job):
    with pytest.raises(TypeError, match="never a command line for a shell"):
        job.start(f"{sys.executable} {FAKE_JOB} {job.dir}")
    assert files.read_status(job.dir) == {}  # nothing written, nothing started


def test_an_exception_in_the_work_ends_failed_with_the_traceback(job):
    job.start(fake(job, "--fail"))
    final = job.wait(timeout=30)
    assert final["state"] == "failed" and final["reason"] == "error"
    assert final["error"] == "RuntimeError: fake failure"
    assert any("Traceback" in line for line in final["log_tail"])


def test_a_killed_job_is_reported_failed_with_its_log_tail(job, wait_for):
    pid = job.start(fake(job, "--steps", "500", "--step-s", "0.05"))
    wait_for(lambda: any(line.startswith("step ") for line in job.logs()), what="a step")
    os.kill(pid, signal.SIGKILL)  # kill -9: it writes nothing more
    wait_for(lambda: gone(pid), what="the kill")
    assert files.read_status(job.dir)["state"] == "running"  # what the dead job left
    seen = job.status()
    assert seen["state"] == "failed" and seen["reason"] == "interrupted"
    assert f"pid {pid}" in seen["error"] and "is gone" in seen["error"]
    assert any(line.startswith("step ") for line in seen["log_tail"])
    assert jobs.open_job(job.dir).status() == seen  # every reader, at every read, agrees
    assert files.read_status(job.dir)["state"] == "running"  # and reading wrote nothing


def test_cancel_asks_and_a_job_that_listens_stops_by_itself(job, wait_for):
    pid = job.start(fake(job, "--steps", "500", "--step-s", "0.05"))
    wait_for(lambda: job.state == "running", what="running")
    final = job.cancel(timeout=30)
    assert final["state"] == "cancelled" and gone(pid)
    assert not any("killing its process group" in line for line in job.logs())
    assert any("cancelled." in line for line in job.logs())


def test_a_job_that_ignores_the_request_is_killed_with_its_whole_group(job, wait_for, monkeypatch):
    monkeypatch.setattr(jobs, "KILL_GRACE_S", 0.3)
    argv = fake(job, "--steps", "500", "--step-s", "0.05", "--ignore-cancel", "--ignore-term",
                "--spawn-child")  # fmt: skip
    pid = job.start(argv)
    wait_for(lambda: (job.dir / "child.pid").exists() and job.state == "running", what="start")
    child = int((job.dir / "child.pid").read_text())
    assert os.getpgid(child) == pid  # the job's grandchild-to-be is in its group
    final = job.cancel(timeout=0.5)
    assert final["state"] == "cancelled"
    # SIGKILL reached the whole group (its delivery is asynchronous: allow the kernel a moment)
    wait_for(lambda: gone(pid) and gone(child), timeout=10, what="the whole group to be gone")
    assert any("killing its process group" in line for line in job.logs())


@pytest.mark.slow
def test_a_device_job_waits_for_its_turn_and_a_job_without_a_device_does_not(tmp_path, wait_for):
    device = f"test-device-{uuid.uuid4().hex[:8]}"  # this test's own queue key
    first, second, free = (jobs.open_job(tmp_path / name) for name in ("first", "second", "free"))
    for j in (first, second, free):
        j.dir.mkdir()
    first.start(fake(first, "--steps", "500", "--step-s", "0.05"), device=device)
    wait_for(lambda: first.state == "running", what="the first device job to run")
    second.start(fake(second, "--steps", "1"), device=device)
    free.start(fake(free, "--steps", "1"))
    assert free.wait(timeout=30)["state"] == "succeeded"  # never waited for the device
    wait_for(lambda: any("waiting in queue" in line for line in second.logs()), what="a wait")
    assert second.state == "queued" and files.read_status(second.dir)["queue"] == device
    first.cancel(timeout=30)
    assert second.wait(timeout=30)["state"] == "succeeded"  # started by itself once free
    assert "queue" not in files.read_status(free.dir)


@pytest.mark.slow
def test_a_queued_job_can_be_cancelled_while_it_waits(tmp_path, wait_for):
    device = f"test-device-{uuid.uuid4().hex[:8]}"
    first, second = jobs.open_job(tmp_path / "a"), jobs.open_job(tmp_path / "b")
    first.dir.mkdir(), second.dir.mkdir()
    first.start(fake(first, "--steps", "500", "--step-s", "0.05"), device=device)
    wait_for(lambda: first.state == "running", what="the first job to run")
    pid = second.start(fake(second), device=device)
    wait_for(lambda: any("waiting in queue" in line for line in second.logs()), what="a wait")
    assert second.cancel(timeout=30)["state"] == "cancelled" and gone(pid)
    assert any("cancelled while queued" in line for line in second.logs())
    assert first.state == "running"
    first.cancel(timeout=30)


def test_a_finished_job_is_reaped_without_anyone_polling_it(job, wait_for):
    pid = job.start(fake(job))
    # Read status.json directly: nothing here polls the process (no process_alive).
    wait_for(lambda: files.read_status(job.dir).get("state") == "succeeded", what="the job")
    wait_for(lambda: not psutil.pid_exists(pid), timeout=10, what=f"job {pid} reaped")
    assert pid not in [child.pid for child in psutil.Process().children()]


def test_start_refuses_a_job_that_is_already_active(job, wait_for):
    job.start(fake(job, "--steps", "500", "--step-s", "0.05"))
    with pytest.raises(RuntimeError, match=f"Job {job.dir.name} is already (queued|running)"):
        job.start(fake(job))
    job.cancel(timeout=30)


def test_kill_group_never_signals_this_process_and_group_only_spares_a_lone_process():
    jobs.kill_group(os.getpid(), grace=0)  # refused: we are still here
    lone = psutil.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # our group
    try:
        jobs.kill_group(lone.pid, grace=0, group_only=True)
        assert lone.poll() is None  # leads no group: nothing was sent, and not to our group
        jobs.kill_group(lone.pid, grace=0)  # alone: that process only
        assert lone.wait(timeout=10) == -signal.SIGKILL
    finally:
        if lone.poll() is None:
            lone.kill()


def test_a_run_with_a_job_in_progress_is_not_started_moved_or_deleted_blind(
    runs_root, sft_data, model_dir, wait_for
):
    run_dir = create_run("sft", sft_data, str(model_dir), runs_dir=runs_root)
    files.write_status(run_dir, {"state": "succeeded"})
    job = jobs.open_job(files.new_job_dir(run_dir, "evaluate"))
    assert files.job_dirs(run_dir, "evaluate") == [job.dir]
    job.start(fake(job, "--steps", "500", "--step-s", "0.05"))
    wait_for(lambda: job.state == "running", what="the job")
    with pytest.raises(RuntimeError, match="has a job in progress"):
        launch.start_run(run_dir)
    with pytest.raises(RuntimeError, match="has a job in progress.*force=True"):
        store.delete_run(run_dir)
    assert store.delete_run(run_dir, force=True) == run_dir.name  # cancels the job first
    assert not run_dir.exists() and job.state is None


@pytest.mark.slow
def test_one_job_of_a_kind_per_run_with_the_runs_log_naming_it(tmp_path, wait_for):
    run_dir = tmp_path / "run"
    run_dir.mkdir()

    def command(steps: str):
        return lambda job_dir: [sys.executable, FAKE_JOB, str(job_dir), "--steps", steps]

    first = jobs.start_on_run(run_dir, "merge", command("500"), device=None)
    assert first.dir.parent == run_dir / files.JOBS_DIR and first.dir.name.startswith("merge-")
    with pytest.raises(ValueError, match="has a merge job in progress already"):
        jobs.start_on_run(run_dir, "merge", command("1"), device=None, error=ValueError)
    other = jobs.start_on_run(run_dir, "evaluate", command("1"), device=None)  # another kind
    assert other.wait(timeout=30)["state"] == "succeeded"
    first.cancel(timeout=30)
    again = jobs.start_on_run(run_dir, "merge", command("1"), device=None)
    assert again.wait(timeout=30)["state"] == "succeeded"
    logged = files.log_path(run_dir).read_text()
    assert logged.count(" merge: ") == 2 and str(again.dir) in logged
