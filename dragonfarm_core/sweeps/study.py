"""The sweep's Optuna study: its storage (SQLite in the sweep's folder), sampler, pruner and
search space, and the record's mirror of its trials.

Optuna does the search (the samplers and the pruner); the study lives in `study.db`, so a
sweep whose process was killed opens the same study again and goes on where it was. The
record's `trials` (`rundir.sweep_record`) are written from the study after every change, for
the readers that do not import Optuna (compare, the app).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import FrozenTrial, TrialState

from dragonfarm_core.rundir import sweep_record

# The pruner starts comparing once this many trials completed: a median of fewer is noise.
PRUNER_STARTUP_TRIALS = 2
STATES = {TrialState.RUNNING: "running", TrialState.COMPLETE: "complete",
          TrialState.PRUNED: "pruned", TrialState.FAIL: "failed",
          TrialState.WAITING: "waiting"}  # fmt: skip
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


class _Grid(optuna.samplers.GridSampler):
    """Optuna's grid sampler, without its `study.stop()` when the grid is used up: that works
    only inside `study.optimize`, and the sweep asks and tells trials itself (it never asks
    for more trials than the grid has)."""

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        return None


def distributions(space: dict[str, Any]) -> dict[str, BaseDistribution]:
    """Optuna's distribution for each setting: listed values are categorical, a range of whole
    numbers an IntDistribution, any other range a FloatDistribution."""
    out: dict[str, BaseDistribution] = {}
    for name, values in space.items():
        if isinstance(values, dict):
            low, high, log, step = values["low"], values["high"], values["log"], values.get("step")
            if isinstance(low, int) and isinstance(high, int):
                out[name] = IntDistribution(low, high, log=log, step=int(step or 1))
            else:
                out[name] = FloatDistribution(low, high, log=log, step=step)
        else:
            out[name] = CategoricalDistribution(values)
    return out


def _sampler(record: dict[str, Any]) -> optuna.samplers.BaseSampler:
    seed, space = record["seed"], record["space"]
    if record["sampler"] == "grid":
        return _Grid(space, seed=seed)
    if record["sampler"] == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    # TPE starts from random points: a quarter of the trials, at least 2 and at most 10.
    startup = max(2, min(10, record["n_trials"] // 4))
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup)


def _pruner(record: dict[str, Any]) -> optuna.pruners.BasePruner:
    if not record["prune"]:
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=PRUNER_STARTUP_TRIALS,
                                       n_warmup_steps=int(record.get("warmup_steps") or 0))  # fmt: skip


def open_study(path: Path, record: dict[str, Any]) -> optuna.Study:
    """The sweep's study, made the first time and loaded from study.db after."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{sweep_record.study_path(path)}"
    return optuna.create_study(storage=storage, study_name=record["id"], sampler=_sampler(record),
                               pruner=_pruner(record), direction=record["direction"],
                               load_if_exists=True)  # fmt: skip


def finished(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=FINISHED))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def trial_row(t: FrozenTrial) -> dict[str, Any]:
    attrs = t.user_attrs
    reported = sorted(t.intermediate_values)
    return {"number": t.number, "state": STATES.get(t.state, str(t.state)),
            "params": dict(t.params), "value": _number(t.value) if t.values else None,
            "run": attrs.get("run"), "run_dir": attrs.get("run_dir"),
            "step": reported[-1] if reported else None,
            "pruned_at": reported[-1] if t.state == TrialState.PRUNED and reported else None,
            "error": attrs.get("error"),
            "started_at": t.datetime_start.isoformat(timespec="seconds")
            if t.datetime_start else None}  # fmt: skip


def mirror(path: Path, study: optuna.Study, **changes: Any) -> dict[str, Any]:
    """Write the study's trials (and `changes`) into the sweep's record."""
    trials = study.get_trials(deepcopy=False)
    done = [t for t in trials if t.state == TrialState.COMPLETE and _number(t.value) is not None]
    best = None
    if done:
        pick = min if study.direction == optuna.study.StudyDirection.MINIMIZE else max
        best = pick(done, key=lambda t: float(t.value or 0.0)).number
    return sweep_record.update(path, trials=[trial_row(t) for t in trials], best=best, **changes)
