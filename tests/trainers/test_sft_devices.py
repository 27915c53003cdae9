"""SFT on two CPU processes (Hardware(device="cpu", devices=2): DDP over gloo under
`accelerate launch`), started by the normal launcher on the bundled model: one set of run
files written by rank 0, and the same loss curve as one process with the same effective batch.

Each process trains on one thread (OMP_NUM_THREADS=1): the two processes share this machine's
two cores.
"""

from __future__ import annotations

import psutil
import pytest
from trainer_fixtures import curves, on_devices, wait_for

from dragonfarm_core.rundir import files, launch
from dragonfarm_core.training import train as training

SAME_RUN = {"batch_size": 2, "max_seq_len": 128, "max_steps": 8, "learning_rate": 2e-3,
            "logging_steps": 1, "save_steps": 100}  # fmt: skip


CANARY = "canary-secret-4e1f"


def _environments(pid: int) -> list[dict[str, str]]:
    """The environment of process `pid` and of every process under it."""
    top = psutil.Process(pid)
    return [p.environ() for p in [top, *top.children(recursive=True)]]


@pytest.fixture
def one_thread_each(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.mark.slow
def test_two_cpu_processes_train_like_one_with_the_same_effective_batch(
    make_run, model_dir, one_thread_each
):
    # Effective batch 8 rows a step in both: 2 rows x 4 passes, or 2 rows x 2 passes x 2.
    one = on_devices(make_run(model_dir, name="one", grad_accum=4, **SAME_RUN), None)
    two = on_devices(make_run(model_dir, name="two", grad_accum=2, **SAME_RUN), 2)
    launch.start_run(one)
    assert wait_for(one)["state"] == "succeeded", files.read_log_tail(one, 40)
    pid = launch.start_run(two)
    status = wait_for(two)
    assert status["state"] == "succeeded", files.read_log_tail(two, 40)

    # The run's pid is the launcher's (it holds the queue ticket); the ranks are its children.
    assert status["pid"] == pid and status["step"] == status["total_steps"] == 8
    log = files.log_path(two).read_text()
    assert "accelerate.commands.launch --multi_gpu --num_processes 2" in log
    assert log.count("Training tiny-support on cpu (float32, 2 processes)") == 1
    assert log.count("Training done;") == 1 and log.count("Done: train loss") == 1
    # One progress.jsonl, one row per logged step (rank 1 writes none), the adapter and the
    # results once.
    train_one, held_one = curves(one)
    train_two, held_two = curves(two)
    assert sorted(train_two) == sorted(train_one) == list(range(1, 9))
    assert sorted(held_two) == sorted(held_one) == [0, 2, 4, 6, 8]
    assert len(files.read_progress(two)) == len(files.read_progress(one)) == 13
    assert sorted(p.name for p in (two / "adapter").iterdir()) == sorted(
        p.name for p in (one / "adapter").iterdir()
    )
    assert len(files.read_json(two / "samples.json")) == 3  # n_samples, not twice that
    assert files.read_json(two / "eval.json")["eval_loss"] == status["metrics"]["eval_loss"]

    # The same curve: the held-out loss (the same 8 rows every time) falls at every
    # measurement in both, from the same untrained adapter, and stays within 3% of one
    # process's. Only which rows make up each step's batch differs (DDP gives each process
    # every other batch), and the order sums are taken in; 3% is ~20x what was measured
    # (<= 0.008 apart at loss ~6-7.5), far below the ~1.6 the curve falls over 8 steps.
    assert held_two[0] == pytest.approx(held_one[0], rel=1e-4)
    for held in (held_one, held_two):
        losses = [held[s] for s in sorted(held)]
        assert all(later < earlier for earlier, later in zip(losses, losses[1:], strict=False))
    for step in held_one:
        assert held_two[step] == pytest.approx(held_one[step], rel=0.03)
    # The training loss is the mean over the two processes (not rank 0's half alone): its
    # mean over the run, and the tokens counted, match one process's.
    metrics_one, metrics_two = files.read_status(one)["metrics"], status["metrics"]
    assert metrics_two["train_loss"] == pytest.approx(metrics_one["train_loss"], rel=0.05)
    assert metrics_two["train_tokens"] == pytest.approx(metrics_one["train_tokens"], rel=0.2)
    for train in (train_one, train_two):
        assert sum(train[s] for s in (6, 7, 8)) / 3 < sum(train[s] for s in (1, 2)) / 2


@pytest.mark.slow
def test_a_cancel_stops_both_processes_and_the_run_resumes_on_both(
    make_run, model_dir, one_thread_each, monkeypatch
):
    run = on_devices(
        make_run(model_dir, name="cancel", grad_accum=2, **{**SAME_RUN, "max_steps": 12}), 2
    )
    for name in ("HF_TOKEN", "OPENAI_API_KEY", "MY_SERVICE_PAT"):  # the caller's secrets
        monkeypatch.setenv(name, CANARY)
    pid = launch.start_run(run)
    wait_for(run, until="step 3")
    # The launcher, accelerate and both ranks run on the allow-listed environment.
    ranks = _environments(pid)
    assert sorted(env.get("RANK") for env in ranks if "RANK" in env) == ["0", "1"]
    assert [name for env in ranks for name, value in env.items() if CANARY in value] == []
    assert launch.cancel_run(run, timeout=120)["state"] == "cancelled"
    [saved] = files.checkpoints(run)  # complete: each process's RNG state, then the marker
    assert {"rng_state_0.pth", "rng_state_1.pth", files.CHECKPOINT_COMPLETE} <= {
        p.name for p in saved.iterdir()
    }
    stopped = int(saved.name.removeprefix(files.CHECKPOINT_PREFIX))

    training.resume(run)
    status = wait_for(run)
    assert status["state"] == "succeeded", files.read_log_tail(run, 40)
    train, _ = curves(run)  # no step twice, none missing across the resume
    assert sorted(train) == list(range(1, 13)) and status["step"] == 12
    assert f"Resuming from {saved.name} (step {stopped})." in files.log_path(run).read_text()
