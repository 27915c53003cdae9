"""One training per device means per device of the machine: the queue key is the resolved device,
and every runs dir and every Python session of the user share one queue, in submission order."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from queue_watch import watch_runs

from dragonfarm_core.rundir import files, queue
from dragonfarm_core.rundir.run import Run
from dragonfarm_core.settings import Hardware
from dragonfarm_core.training.train import train

ROOT = Path(__file__).resolve().parents[2]
not_on_apple = pytest.mark.skipif(sys.platform == "darwin", reason="auto is mps on a Mac")


@pytest.fixture
def no_gpu(monkeypatch):
    """This process and its trainers see no GPU, whatever the machine has."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


def test_auto_is_the_cpu_on_a_machine_without_a_gpu(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(queue, "_torch_build", lambda: {"cuda": "12.4"})
    monkeypatch.setattr(queue, "_gpus_present", lambda build: False)
    if sys.platform != "darwin":
        assert queue.resolve_device("auto") == "cpu"
    cpu = queue.queue_key({"hardware": {"device": "cpu"}})
    assert queue.queue_key({"hardware": {"device": "auto"}}) == cpu == "cpu"
    assert queue.queue_key({}) == queue.resolve_device("auto")


def test_a_gpu_is_named_as_the_machine_numbers_it(monkeypatch):
    monkeypatch.setattr(queue, "_torch_build", lambda: {"cuda": "12.4"})
    monkeypatch.setattr(queue, "_gpus_present", lambda build: True)
    assert queue.resolve_device("auto", {}) == queue.resolve_device("cuda", {}) == "cuda:0"
    pinned = {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert queue.resolve_device("auto", pinned) == "cuda:2"
    assert queue.resolve_device("cuda:1", pinned) == "cuda:3"
    assert queue.resolve_device("auto", {"CUDA_VISIBLE_DEVICES": "GPU-8f2a"}) == "cuda:GPU-8f2a"
    assert queue.resolve_device("auto", {"CUDA_VISIBLE_DEVICES": ""}) == "cpu"
    assert queue.resolve_device("auto", {"CUDA_VISIBLE_DEVICES": "-1"}) == "cpu"
    assert queue.resolve_device("mps", pinned) == "mps"


def test_the_queue_lives_in_the_users_cache_folder(monkeypatch):
    monkeypatch.delenv(queue.QUEUE_DIR_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert queue.queue_dir() == Path.home() / ".cache" / "dragonfarm" / "queue"
    assert queue.queue_dir({"XDG_CACHE_HOME": "/c"}) == Path("/c/dragonfarm/queue")
    assert queue.queue_dir({queue.QUEUE_DIR_ENV: "/q", "XDG_CACHE_HOME": "/c"}) == Path("/q")


@not_on_apple
@pytest.mark.slow
def test_cpu_and_auto_runs_of_two_runs_dirs_take_turns_in_submission_order(
    runs_root, tmp_path, sft_data, model_dir, monkeypatch, no_gpu
):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "4")
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.1")
    other = tmp_path / "other-runs"
    other.mkdir()
    cpu, auto = Hardware(device="cpu"), Hardware(device="auto")
    runs = [
        train(sft_data, str(model_dir), hardware=hw, name=f"r{i}", runs_dir=where)
        for i, (hw, where) in enumerate(
            [(cpu, runs_root), (auto, other), (auto, runs_root), (cpu, other)]
        )
    ]
    order, most = watch_runs(runs)
    assert most == 1
    assert order == [run.id for run in runs]
    assert [run.state for run in runs] == ["succeeded"] * 4
    assert {files.read_status(run.dir)["queue"] for run in runs} == {"cpu"}
    assert any("waiting in queue cpu" in line for line in runs[3].logs())


SUBMIT = """
import sys
from dragonfarm_core.data.dataset import dataset
from dragonfarm_core.training.train import train
ds = dataset(sys.argv[1]).map(prompt="question", response="answer")
print(train(ds, sys.argv[2], runs_dir=sys.argv[3]).dir)
"""


@not_on_apple
@pytest.mark.slow
def test_a_run_another_python_session_submits_waits_for_this_sessions_run(
    runs_root, tmp_path, sft_data, model_dir, monkeypatch, wait_for, no_gpu
):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "400")
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.05")
    first = train(sft_data, str(model_dir), hardware=Hardware(device="cpu"), runs_dir=runs_root)
    wait_for(lambda: first.state == "running", what="the first run to start")
    other = tmp_path / "notebook-runs"  # another session, with a runs dir of its own
    env = {**os.environ, "PYTHONPATH": os.environ["PYTHONPATH"] + os.pathsep + str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", SUBMIT, sft_data.source, str(model_dir), str(other)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    second = Run(done.stdout.strip().splitlines()[-1])
    wait_for(
        lambda: any("waiting in queue cpu" in line for line in second.logs()),
        what="the other session's run to wait",
    )
    time.sleep(1.0)
    assert second.state == "queued" and first.state == "running"
    first.cancel(timeout=10)
    wait_for(lambda: second.state == "running", what="the waiting run to start by itself")
    second.cancel(timeout=10)


def test_the_ticket_of_a_dead_process_is_removed_and_holds_nothing_up(
    runs_root, sft_data, model_dir, monkeypatch, wait_for
):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "2")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with queue._locked() as tickets:
        stale = queue._ticket_path(tickets, gone.pid)
        ticket = {"host": socket.gethostname(), "pid": gone.pid, "create_time": time.time()}
        files.write_json(stale, {**ticket, "key": "cpu", "queued_ts": 0.0, "state": "running"})
    run = train(sft_data, str(model_dir), hardware=Hardware(device="cpu"), runs_dir=runs_root)
    assert run.wait(timeout=30, poll=0.05).state == "succeeded"
    assert not stale.exists()
    mine = queue._ticket_path(tickets, files.read_status(run.dir)["pid"])
    wait_for(lambda: not mine.exists(), timeout=10, what="the trainer to take its ticket away")
