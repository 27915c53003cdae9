"""A run on several devices: the queue reserves every device it uses, and the trainer starts
its processes through `accelerate launch` with the command `launch.accelerate_command` builds."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from dragonfarm_core.rundir import launch, queue

GPUS = {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}


@pytest.fixture
def four_gpus(monkeypatch):
    """A CUDA build of torch that sees GPUs 4-7 of the machine."""
    monkeypatch.setattr(queue, "_torch_build", lambda: {"cuda": "12.4"})
    monkeypatch.setattr(queue, "_gpus_present", lambda build: True)
    for name, value in GPUS.items():
        monkeypatch.setenv(name, value)


def test_a_run_on_several_gpus_queues_on_each_as_the_machine_numbers_it(four_gpus):
    assert queue.run_devices({"device": "cuda", "devices": 2}) == ["cuda:4", "cuda:5"]
    assert queue.queue_key({"hardware": {"device": "auto", "devices": "cuda:1,3"}}) == (
        "cuda:5,cuda:7"
    )
    assert queue.queue_key({"hardware": {"device": "cuda:2"}}) == "cuda:6"
    # Several CPU processes share the CPU: one queue, as one process.
    assert queue.queue_key({"hardware": {"device": "cpu", "devices": 2}}) == "cpu"


def _ahead_of(key: str) -> list[str]:
    """The runs queued before a run submitted now on `key`."""
    mine = {"pid": -1, "key": key, "queued_ts": time.time(), "run_dir": "new"}
    with queue._locked() as tickets:
        return queue._competition(tickets, mine)[0]


def test_a_run_waits_while_any_of_its_gpus_is_taken(tmp_path, monkeypatch):
    monkeypatch.setenv(queue.QUEUE_DIR_ENV, str(tmp_path / "queue"))
    keys = ["cuda:1", "cuda:2,cuda:3", "cpu"]
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    waiting = [subprocess.Popen(sleep) for _ in keys]  # live processes hold the tickets
    try:
        for proc, key in zip(waiting, keys, strict=True):
            created = psutil.Process(proc.pid).create_time()
            queue.register(tmp_path / key, proc.pid, created, time.time() - 10, key)
        assert _ahead_of("cuda:0,cuda:1") == [str((tmp_path / "cuda:1").resolve())]
        assert _ahead_of("cuda:3") == [str((tmp_path / "cuda:2,cuda:3").resolve())]
        assert _ahead_of("cuda:0") == []
    finally:
        for proc in waiting:
            proc.kill()
            proc.wait()


def _config(**hardware):
    return {"hardware": {"device": "auto", "dtype": "auto", **hardware}}


def test_one_device_needs_no_launcher(tmp_path):
    assert launch.accelerate_command(tmp_path, _config()) is None
    assert launch.accelerate_command(tmp_path, _config(device="cpu", devices=1)) is None


def test_several_gpus_start_ddp_on_the_gpus_the_queue_reserved(tmp_path, four_gpus):
    command = launch.accelerate_command(tmp_path, _config(device="cuda", devices="cuda:0,2"))
    assert command[:3] == [sys.executable, "-m", "accelerate.commands.launch"]
    flags = {flag: command[i + 1] for i, flag in enumerate(command) if flag.startswith("--")}
    assert flags["--num_processes"] == "2" and flags["--gpu_ids"] == "4,6"
    assert flags["--num_machines"] == "1" and flags["--main_process_port"] == "0"
    assert "--multi_gpu" in command and "--config_file" not in command
    assert command[-3:] == ["-m", "dragonfarm_core.trainers", str(tmp_path)]


def test_cpu_processes_split_the_cores_unless_omp_num_threads_is_set(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    command = launch.accelerate_command(tmp_path, _config(device="cpu", devices=2))
    assert "--gpu_ids" not in command and command[command.index("--num_processes") + 1] == "2"
    assert int(command[command.index("--num_cpu_threads_per_process") + 1]) >= 1
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    command = launch.accelerate_command(tmp_path, _config(device="cpu", devices=2))
    assert "--num_cpu_threads_per_process" not in command  # accelerate takes the user's


def test_an_accelerate_config_file_decides_how_the_processes_start(tmp_path):
    config = tmp_path / "fsdp.yaml"
    command = launch.accelerate_command(
        tmp_path, _config(device="cpu", devices=2, accelerate_config=str(config))
    )
    assert command[3:5] == ["--config_file", str(config)]
    assert "--num_processes" not in command and "--multi_gpu" not in command
