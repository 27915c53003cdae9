"""DPO, ORPO and GRPO on two CPU processes (Hardware(device="cpu", devices=2): DDP over gloo
under `accelerate launch`), started by the normal launcher on the bundled model: one set of run
files written by rank 0; for DPO and ORPO the same held-out curve as one process with the same
effective batch (GRPO samples, so its curve is not one process's; it learns, and writes once).

Each process trains on one thread (OMP_NUM_THREADS=1): the two processes share this machine's
two cores.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from test_dpo import pairs_dataset, write_run
from test_grpo import _create
from trainer_fixtures import curves, on_devices, wait_for

from dragonfarm_core.rewards import reward
from dragonfarm_core.rundir import files, launch
from dragonfarm_core.training import train as training

SAME_RUN = {"batch_size": 2, "max_steps": 6, "learning_rate": 3e-4, "save_steps": 100}


@pytest.fixture
def one_thread_each(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def _succeeds(run_dir: Path) -> dict:
    launch.start_run(run_dir)
    status = wait_for(run_dir)
    assert status["state"] == "succeeded", files.read_log_tail(run_dir, 40)
    return status


def _lines_with(log: str, start: str) -> list[str]:
    """The log's lines from each `start` on: the other process's progress bar (written with
    carriage returns, no newline) can put its text before a line in the same log line."""
    return [line[line.index(start) :] for line in log.splitlines() if start in line]


def _written_once(run_dir: Path, method: str) -> None:
    """One process wrote the run: the first line, the results and the samples once."""
    log = files.log_path(run_dir).read_text()
    assert "accelerate.commands.launch --multi_gpu --num_processes 2" in log
    first = _lines_with(log, f"{method} on ")
    assert len(first) == 1 and ", cpu (float32, 2 processes): 24 pairs" in first[0], log
    assert log.count("Training done;") == 1 and log.count("Done: train loss") == 1
    assert len(files.read_json(run_dir / "samples.json")) == 2  # n_samples, not twice that
    rows = files.read_progress(run_dir)
    assert all(r["pref_acc"] is None or 0 <= r["pref_acc"] <= 1 for r in rows)


FIRST_LINE = {"dpo": "DPO (sigmoid loss, beta 0.1)", "orpo": "ORPO (beta 0.1)"}


@pytest.mark.slow
@pytest.mark.parametrize("method", ["dpo", "orpo"])
def test_two_processes_follow_one_process_with_the_same_effective_batch(
    tmp_path, model_dir, one_thread_each, method
):
    # Effective batch 4 pairs a step in both: 2 pairs x 2 passes, or 2 pairs x 1 pass x 2.
    data = pairs_dataset(30)
    one = on_devices(write_run(method, data, str(model_dir), tmp_path / "one", {"beta": 0.1},
                               grad_accum=2, **SAME_RUN), None)  # fmt: skip
    two = on_devices(write_run(method, data, str(model_dir), tmp_path / "two", {"beta": 0.1},
                               grad_accum=1, **SAME_RUN), 2)  # fmt: skip
    _succeeds(one)
    status = _succeeds(two)
    assert status["step"] == status["total_steps"] == 6
    _written_once(two, FIRST_LINE[method])

    train_one, held_one = curves(one)
    train_two, held_two = curves(two)
    assert sorted(train_two) == sorted(train_one) == list(range(1, 7))
    assert sorted(held_two) == sorted(held_one) == [0, 2, 4, 6]
    # The same untrained adapter; then the held-out loss (the same 6 pairs each time) falls in
    # both, and stays near one process's at every measurement. Measured at most 1.2 % apart
    # (DPO) and 0.03 % (ORPO): only which pairs make up each process's half of a step differs.
    assert held_two[0] == pytest.approx(held_one[0], rel=1e-4)
    for held in (held_one, held_two):
        assert held[6] < held[4] < held[2] < held[0]
    for step in held_one:
        assert held_two[step] == pytest.approx(held_one[step], rel=0.03)
    if method == "dpo":  # every pair ties at the start, so the steps compare one by one:
        assert held_one[0] == pytest.approx(math.log(2), abs=1e-4)  # measured <= 2.5 % apart
        assert held_two[6] < 0.6 * held_two[0]
        for step in train_one:
            assert train_two[step] == pytest.approx(train_one[step], rel=0.06)
    evaluated = files.read_json(two / "eval.json")
    assert evaluated["eval_loss"] == status["metrics"]["eval_loss"] and evaluated["eval_pairs"] == 6
    # The training loss logged is the mean over both processes' pairs, not rank 0's half.
    assert status["metrics"]["train_loss"] == pytest.approx(
        files.read_status(one)["metrics"]["train_loss"], rel=0.05
    )


@pytest.mark.slow
def test_grpo_on_two_processes_samples_scores_and_learns_as_one_run(
    tmp_path, model_dir, one_thread_each
):
    # A length reward with spread from the start (shorter completions win), so every step has
    # an advantage to learn from: 2 prompts x 4 completions on each process. Completions of
    # this model run about 90-140 characters, and the score falls from 1 at 80 to 0 at 160, so
    # every group has spread whatever the sampler draws (at 40, only a completion that stopped
    # early scored, and whether one did in the first steps was the seed's luck).
    run = on_devices(_create(tmp_path, model_dir, [reward("length", max_chars=80)],
                             learning_rate=1e-3, max_steps=4, save_steps=100), 2)  # fmt: skip
    status = _succeeds(run)
    assert status["step"] == status["total_steps"] == 4
    log = files.log_path(run).read_text()
    first = _lines_with(log, "GRPO on ")
    assert len(first) == 1 and "(cpu, float32, 2 processes): 23 prompts x 4 completions" in first[0]
    assert log.count("Done: held-out reward") == 1
    rows = files.read_progress(run)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]  # rank 1 writes none
    assert all(0 <= r["reward"] <= 1 and r["reward"] == r["reward_length"] for r in rows)
    assert rows[0]["kl"] == pytest.approx(0, abs=1e-6) and rows[-1]["kl"] > 1e-4  # it moved
    assert files.read_eval(run)["eval_prompts"] == 1 and len(files.read_samples(run)) == 1


@pytest.mark.slow
def test_a_grpo_run_on_two_processes_cancels_and_resumes_on_both(
    tmp_path, model_dir, one_thread_each
):
    run = on_devices(_create(tmp_path, model_dir, [reward("length", max_chars=40)],
                             learning_rate=1e-3, max_steps=8, save_steps=100), 2)  # fmt: skip
    launch.start_run(run)
    wait_for(run, until="step 3")
    assert launch.cancel_run(run, timeout=120)["state"] == "cancelled"
    [saved] = files.checkpoints(run)  # complete: each process's RNG state, then the marker
    assert {"rng_state_0.pth", "rng_state_1.pth", files.CHECKPOINT_COMPLETE} <= {
        p.name for p in saved.iterdir()
    }
    stopped = int(saved.name.removeprefix(files.CHECKPOINT_PREFIX))
    assert 3 <= stopped < 8

    training.resume(run)
    status = wait_for(run)
    assert status["state"] == "succeeded", files.read_log_tail(run, 40)
    assert status["step"] == 8
    steps = [r["step"] for r in files.read_progress(run) if r.get("loss") is not None]
    assert steps == list(range(1, 9))  # no step twice, none missing across the resume
    log = files.log_path(run).read_text()
    assert f"Resuming from {saved.name} (step {stopped})." in log
    assert log.count("Done: held-out reward") == 1
