"""The device queue: runs wait visibly as queued, start by themselves in submission order, can
be cancelled while waiting, and the queue survives the process that submitted them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from queue_watch import watch_runs

from dragonfarm_core.rundir import files, launch
from dragonfarm_core.rundir.run import Run
from dragonfarm_core.settings import Hardware
from dragonfarm_core.training.train import train

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_runs_wait_their_turn_in_submission_order(runs_root, sft_data, model_dir, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "4")
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.1")
    runs = [train(sft_data, str(model_dir), name=f"r{i}", runs_dir=runs_root) for i in range(3)]
    assert [run.state for run in runs[1:]] == ["queued", "queued"]
    order, most = watch_runs(runs)
    assert order == [run.id for run in runs]
    assert most == 1
    assert [run.state for run in runs] == ["succeeded"] * 3
    assert any("waiting in queue" in line for line in runs[2].logs())


@pytest.mark.slow
def test_max_concurrent_lets_two_run_at_once(runs_root, sft_data, model_dir, monkeypatch):
    monkeypatch.setenv("DRAGONFARM_MAX_CONCURRENT", "2")
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "6")
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.1")
    runs = [train(sft_data, str(model_dir), name=f"r{i}", runs_dir=runs_root) for i in range(3)]
    order, most = watch_runs(runs)
    assert most == 2 and order[-1] == runs[2].id


@pytest.mark.slow
def test_runs_on_different_devices_do_not_wait_for_each_other(
    runs_root, sft_data, model_dir, monkeypatch, wait_for
):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "100")
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.05")
    # The stand-in trainer never touches the device, so a "cuda" run works on any machine.
    on_gpu = train(sft_data, str(model_dir), hardware=Hardware(device="cuda"), runs_dir=runs_root)
    on_cpu = train(sft_data, str(model_dir), hardware=Hardware(device="cpu"), runs_dir=runs_root)
    wait_for(lambda: on_gpu.state == on_cpu.state == "running", what="both running")
    on_gpu.cancel(timeout=10)
    on_cpu.cancel(timeout=10)


@pytest.mark.slow
def test_a_queued_run_can_be_cancelled_while_it_waits(
    runs_root, sft_data, model_dir, monkeypatch, wait_for
):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "400")
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.05")
    first = train(sft_data, str(model_dir), runs_dir=runs_root)
    second = train(sft_data, str(model_dir), runs_dir=runs_root)
    wait_for(lambda: first.state == "running", what="the first run to start")
    waiting = files.read_status(second.dir)
    assert waiting["state"] == "queued" and launch.process_alive(waiting)
    second.cancel(timeout=10)
    assert second.state == "cancelled"
    assert not launch.process_alive(waiting), "the waiting process leaves with the cancel"
    assert any("cancelled while queued" in line for line in second.logs())
    assert first.state == "running"
    first.cancel(timeout=10)


APP = """
import json, sys
from dragonfarm_core.data.dataset import dataset
from dragonfarm_core.training.train import train
ds = dataset(sys.argv[1]).map(prompt="question", response="answer")
runs = [train(ds, sys.argv[2], runs_dir=sys.argv[3]) for _ in range(2)]
print(json.dumps([str(r.dir) for r in runs]))
"""
LISTER = """
import sys
from dragonfarm_core.rundir.store import runs
print(runs(sys.argv[1])[["id", "state"]].to_json(orient="records"))
"""


def _python(code: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.environ["PYTHONPATH"] + os.pathsep + str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_the_queue_survives_an_app_restart(runs_root, sft_data, model_dir, monkeypatch, wait_for):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "400")
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.05")
    dirs = json.loads(_python(APP, sft_data.source, str(model_dir), str(runs_root)))
    first, second = Run(dirs[0]), Run(dirs[1])
    wait_for(lambda: first.state == "running", what="the first run to start")
    listed = {row["id"]: row["state"] for row in json.loads(_python(LISTER, str(runs_root)))}
    assert listed == {first.id: "running", second.id: "queued"}
    first.cancel(timeout=10)
    wait_for(lambda: second.state == "running", what="the queued run to start by itself")
    second.cancel(timeout=10)
