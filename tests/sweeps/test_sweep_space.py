"""What a sweep is asked is checked before anything is queued: setting names, values, ranges,
sampler and trial count, objective, pruning; each refusal says what to change, and nothing
is written."""

from __future__ import annotations

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.rundir import files
from dragonfarm_core.sweeps import space


def _refused(base, runs_root, match, **kw):
    kw.setdefault("space", {"learning_rate": [1e-4, 1e-3]})
    with pytest.raises(dragon.SweepError, match=match):
        dragon.sweep(base, runs_dir=runs_root, **kw)
    assert not (runs_root / files.SWEEPS_DIR).exists()  # nothing was written or queued


@pytest.mark.parametrize(("space_", "match"), [
    ({"learnin_rate": [1e-4]}, "no setting 'learnin_rate'.*learning_rate"),
    ({"learning_rate": []}, "has no values"),
    ({"learning_rate": {"low": 1e-3, "high": 1e-4}}, "range is empty"),
    ({"learning_rate": {"low": 0, "high": 1e-3, "log": True}}, "log scale"),
    ({"learning_rate": [1e-4, 1e-4]}, "lists a value twice"),
    ({"learning_rate": "1e-4"}, "list of values or a range"),
    ({"r": {"low": 4.5, "high": 16}}, "whole number"),
    ({"learning_rate": [5.0]}, r"learning_rate = 5.0 is refused.*above the maximum 1.0"),
    ({"r": [0, 8]}, r"lora.r = 0 is refused"),
    ({}, "space must be a dict"),
])  # fmt: skip
def test_a_bad_space_is_refused_naming_the_setting(base, runs_root, space_, match):
    _refused(base, runs_root, match, space=space_)


@pytest.mark.parametrize(("kw", "match"), [
    ({"n_trials": 0}, "at least 1"),
    ({"n_trials": 5, "sampler": "grid"}, "grid has 2 points"),
    ({"sampler": "bayes"}, "grid, random, tpe"),
    ({"space": {"learning_rate": {"low": 1e-4, "high": 1e-3}}, "sampler": "grid"},
     "A grid needs values"),
    ({"space": {"learning_rate": {"low": 1e-4, "high": 1e-3}}}, "n_trials is needed"),
    ({"objective": "pref_accuracy"}, "sft run does not produce 'pref_accuracy'"),
    ({"objective": "metric_bleu"}, "no built-in task metric 'bleu'"),
    ({"objective": "judge_win_rate"}, "needs a judge"),
    ({"objective": "metric_exact", "prune": True}, "prune=True needs an objective"),
    ({"seed": -1}, "seed must be"),
    ({"judge": print, "objective": "judge_mean_score"}, "own process"),
])  # fmt: skip
def test_a_bad_sweep_is_refused_before_anything_is_queued(base, runs_root, kw, match):
    _refused(base, runs_root, match, **kw)


def test_names_take_a_group_prefix_or_compares_column(base):
    got = space.normalize({"lr": [1e-4], "lora_r": [4], "args.epochs": [1, 2],
                           "warmup_ratio": {"low": 0.0, "high": 0.1}}, "sft")  # fmt: skip
    assert list(got) == ["args.learning_rate", "lora.r", "args.epochs", "args.warmup_ratio"]
    assert got["args.warmup_ratio"] == {"low": 0.0, "high": 0.1, "log": False}
    assert "method_args.beta" in space.normalize({"beta": [0.1, 0.2]}, "dpo")
    with pytest.raises(dragon.SweepError, match="no setting 'beta'"):
        space.normalize({"beta": [0.1]}, "sft")


def test_the_objective_decides_the_direction_and_the_pruning(base):
    assert space.check_objective("eval_loss", base, judge=False) == "minimize"
    assert space.check_objective("metric_exact", base, judge=False) == "maximize"
    assert space.check_objective("judge_win_rate", base, judge=True) == "maximize"
    assert space.check_prune(None, "eval_loss") is True
    assert space.check_prune(None, "metric_exact") is False
    assert space.check_prune(False, "eval_loss") is False
