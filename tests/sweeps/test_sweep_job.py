"""Sweeps as jobs, on the fake trainer (its held-out loss is best at lr 3e-4 and r 16): a grid
runs every point as a normal run and finds the best; the pruner cancels clearly worse trials
(their runs keep a checkpoint); a sweep cancelled, or killed, goes on from the trial it was
training (that run resumed, never trained twice); compare() takes a sweep."""

from __future__ import annotations

import os
import signal

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.rundir import files, sweep_record

GRID = {"learning_rate": [1e-2, 3e-4, 3e-3, 1e-4], "r": [16]}


@pytest.mark.slow
def test_a_grid_trains_every_point_and_prunes_the_clearly_worse(base, runs_root, evaluating):
    s = dragon.sweep(base, GRID, runs_dir=runs_root, name="lr-grid", wait=True)
    record = s.status()
    assert record["status"] == "succeeded", s.logs()
    assert record["sampler"] == "grid" and record["n_trials"] == 4 and record["prune"] is True
    trials = s.trials
    assert sorted(trials["learning_rate"]) == sorted(GRID["learning_rate"])
    assert trials.loc[trials["best"], "learning_rate"].tolist() == [3e-4]
    assert s.best_run is not None and s.best_run.config["args"]["learning_rate"] == 3e-4
    states = dict(zip(trials["learning_rate"], trials["state"], strict=True))
    # Two trials complete first (the pruner's start-up); a later one worse than their median is
    # pruned at its first held-out loss, its run cancelled with a checkpoint.
    pruned = trials[trials["state"] == "pruned"]
    assert len(pruned) >= 1, trials
    for run_dir in pruned["run_dir"]:
        run = dragon.open_run(run_dir)
        assert run.status()["state"] == "cancelled"
        assert files.checkpoints(run.dir)
    assert states[3e-4] == "complete"
    # Each trial is a normal run in the runs dir, named after the sweep.
    listed = dragon.runs(runs_dir=runs_root)
    assert sorted(listed["id"]) == sorted(trials["run"])
    assert all(name.startswith("lr-grid-t") for name in listed["name"])
    table = dragon.compare(s)
    assert sorted(table["lr"]) == sorted(GRID["learning_rate"])
    assert dragon.list_sweeps(runs_root)[0]["best_run"] == s.best["run"]


@pytest.mark.slow
def test_without_pruning_every_trial_completes(base, runs_root, evaluating):
    s = dragon.sweep(base, GRID, prune=False, runs_dir=runs_root, wait=True)
    assert set(s.trials["state"]) == {"complete"}
    assert s.best["params"] == {"args.learning_rate": 3e-4, "lora.r": 16}


@pytest.mark.slow
def test_tpe_and_random_sample_ranges_seeded(base, runs_root, evaluating, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "2")
    space_ = {"learning_rate": {"low": 1e-4, "high": 1e-2, "log": True}, "r": [4, 16]}
    a = dragon.sweep(base, space_, n_trials=3, sampler="random", seed=7, runs_dir=runs_root,
                     wait=True)  # fmt: skip
    b = dragon.sweep(base, space_, n_trials=3, sampler="random", seed=7, runs_dir=runs_root,
                     wait=True)  # fmt: skip
    assert a.trials["learning_rate"].tolist() == b.trials["learning_rate"].tolist()
    assert all(1e-4 <= lr <= 1e-2 for lr in a.trials["learning_rate"])
    t = dragon.sweep(base, space_, n_trials=3, runs_dir=runs_root, wait=True)
    assert t.status()["sampler"] == "tpe" and t.state == "succeeded"


def _training_trial(s, wait_for, number):
    """The run of trial `number` once it trains past its first checkpoint."""

    def started():
        trials = sweep_record.read(s.path)["trials"]
        return (len(trials) > number and trials[number].get("run_dir")
                and files.checkpoints(trials[number]["run_dir"]) != [])  # fmt: skip

    wait_for(started, timeout=90, what=f"trial {number} to train")
    return dragon.open_run(sweep_record.read(s.path)["trials"][number]["run_dir"])


@pytest.mark.slow
def test_a_cancelled_sweep_resumes_the_trial_it_was_training(base, runs_root, evaluating,
                                                             monkeypatch, wait_for):  # fmt: skip
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "40")
    monkeypatch.setenv("FAKE_TRAINER_SAVE_EVERY", "4")
    s = dragon.sweep(base, {"learning_rate": [3e-4, 1e-3]}, prune=False, runs_dir=runs_root)
    run = _training_trial(s, wait_for, 0)
    record = dragon.sweep_cancel(s)
    assert record["status"] == "cancelled"
    assert run.status()["state"] == "cancelled" and files.checkpoints(run.dir)
    assert s.trials["state"].tolist() == ["running"]
    dragon.resume_sweep(s, wait=True)
    record = s.status()
    assert record["status"] == "succeeded", s.logs()
    assert [t["run"] for t in record["trials"]][0] == run.id  # resumed, not trained again
    assert len(dragon.runs(runs_dir=runs_root)) == 2
    assert "Resuming from" in "\n".join(run.logs(200))


@pytest.mark.slow
def test_a_killed_sweep_is_failed_then_resumed_without_training_twice(
    base, runs_root, evaluating, monkeypatch, wait_for
):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "40")
    monkeypatch.setenv("FAKE_TRAINER_SAVE_EVERY", "4")
    s = dragon.sweep(base, {"learning_rate": [3e-4, 1e-3, 1e-4]}, prune=False,
                     runs_dir=runs_root)  # fmt: skip
    first = _training_trial(s, wait_for, 0)
    pid = sweep_record.job(s.path).status()["pid"]
    os.killpg(pid, signal.SIGKILL)  # the sweep's process group; the trainer has its own
    wait_for(lambda: s.state == "failed", timeout=20, what="the sweep to read failed")
    assert "resume_sweep" in s.status()["error"]
    dragon.resume_sweep(s, wait=True)
    record = s.status()
    assert record["status"] == "succeeded", s.logs()
    assert len(record["trials"]) == 3 and record["trials"][0]["run"] == first.id
    assert len(dragon.runs(runs_dir=runs_root)) == 3  # no trial trained twice
    assert {t["state"] for t in record["trials"]} == {"complete"}
    assert s.best["params"]["args.learning_rate"] == 3e-4
