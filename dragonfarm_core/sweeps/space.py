"""What a sweep searches and for what: the settings it varies, their values or ranges, and
the objective, all checked before anything is queued.

    space = {"learning_rate": [1e-4, 3e-4, 1e-3],            # values (a grid can take them)
             "r": [4, 8, 16],                                 # lora.r
             "warmup_ratio": {"low": 0.0, "high": 0.1}}       # a range (random and TPE)
    {"low": 1e-5, "high": 1e-3, "log": True}                  # a range sampled on a log scale

A setting is named by its field in the run's settings groups: `args` (TrainArgs), `lora`
(Lora) and `method_args` (the method's group: beta, group_size, ...), as `learning_rate` or
`args.learning_rate` (the group prefix is needed only where two groups share a name), or by
Compare's column for it (`lr`, `lora_r`). `normalize` gives each its full name. Every value
is tried against the base spec (`RunSpec` checks it) here, so a sweep never queues a trial
that its settings refuse.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from dragonfarm_core.evaluation.compare import better
from dragonfarm_core.methods import EACH_REWARD, METHODS
from dragonfarm_core.rewards.task_metrics import metrics
from dragonfarm_core.settings import Lora, SettingsError, TrainArgs
from dragonfarm_core.spec import RunSpec

SAMPLERS = ("grid", "random", "tpe")
# Compare's names for two settings.
ALIASES = {"lr": "args.learning_rate", "lora_r": "lora.r"}
# Settings a sweep does not vary: where the run writes, what it logs, and the extra keywords.
NOT_SWEPT = frozenset({"extra", "logging_steps", "save_steps", "rewards", "target_modules"})
# The held-out figures a trainer logs while it trains (progress.jsonl), by objective: what the
# pruner watches. The perplexity is exp(held-out loss): the same order.
PRUNED_ON = {"eval_loss": "eval_loss", "perplexity": "eval_loss",
             "pref_accuracy": "eval_pref_acc", "reward_margin": "eval_reward_margin"}  # fmt: skip
# eval.json counts that are no result to optimize.
NOT_OBJECTIVES = frozenset({"eval_tokens", "eval_pairs", "eval_prompts"})
JUDGE_OBJECTIVES = ("judge_win_rate", "judge_loss_rate", "judge_mean_score")
# The pruner never stops a trial in the first fifth of a run: early held-out losses say little
# about the end (bench/sweep.py's best trial, lr 1e-2, was the worst of all at step 6 of 45).
PRUNER_WARMUP = 0.2
# Held-out figures a pruned sweep's trial logs in a run, where its settings leave eval_steps
# unset (the trainer's default is 4): the pruner can stop a trial only where it reports.
EVALUATIONS = 10


class SweepError(ValueError):
    """A sweep that cannot run as asked; the message says what to change."""


def _groups(method: str) -> dict[str, type]:
    out: dict[str, type] = {"args": TrainArgs, "lora": Lora}
    settings = METHODS[method].settings
    if settings is not None:
        out["method_args"] = settings
    return out


def setting_names(method: str) -> dict[str, tuple[str, str, type]]:
    """Every setting a sweep of `method` can vary: full name -> (group, field, type)."""
    out = {}
    for group, cls in _groups(method).items():
        for f in dataclasses.fields(cls):
            if f.name not in NOT_SWEPT:
                out[f"{group}.{f.name}"] = (group, f.name, cls)
    return out


def full_name(name: Any, method: str) -> str:
    """`name` as `group.field`; an unknown or ambiguous one is refused with the choices."""
    known = setting_names(method)
    if not isinstance(name, str) or not name.strip():
        raise SweepError(f"A setting's name must be text, got {name!r}.")
    name = ALIASES.get(name.strip(), name.strip())
    if name in known:
        return name
    found = [full for full in known if full.split(".", 1)[1] == name]
    if len(found) == 1:
        return found[0]
    shown = ", ".join(sorted(full.split(".", 1)[1] for full in known))
    if found:
        raise SweepError(f"Setting {name!r} is in more than one group; name it as one of "
                         f"{', '.join(found)}.")  # fmt: skip
    raise SweepError(f"A {method} run has no setting {name!r} a sweep can vary. Choose from: "
                     f"{shown} (or lr, lora_r).")  # fmt: skip


def _is_range(values: Any) -> bool:
    return isinstance(values, dict)


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _check_range(name: str, values: dict[str, Any], is_int: bool) -> dict[str, Any]:
    unknown = set(values) - {"low", "high", "log", "step"}
    if unknown:
        raise SweepError(f"{name}'s range takes low, high, log and step; not {sorted(unknown)}.")
    low: Any = values.get("low")
    high: Any = values.get("high")
    if not _number(low) or not _number(high):
        raise SweepError(f"{name}'s range needs numbers low and high, got {low!r} and {high!r}.")
    if not low < high:
        raise SweepError(f"{name}'s range is empty ({low} to {high}): low must be below high.")
    log = values.get("log", False)
    if not isinstance(log, bool):
        raise SweepError(f"{name}'s log must be True or False, got {log!r}.")
    if log and low <= 0:
        raise SweepError(f"{name}'s range is on a log scale: low must be above 0, got {low}.")
    step = values.get("step")
    if step is not None and (not _number(step) or step <= 0):
        raise SweepError(f"{name}'s step must be a number above 0, got {step!r}.")
    if log and step is not None:
        raise SweepError(f"{name}'s range cannot have both log=True and a step; drop one.")
    if is_int and not (float(low).is_integer() and float(high).is_integer()):
        raise SweepError(f"{name} is a whole number: its range needs whole ends, "
                         f"got {low} to {high}.")  # fmt: skip
    out = {"low": int(low) if is_int else float(low), "high": int(high) if is_int else float(high),
           "log": log}  # fmt: skip
    if step is not None:
        out["step"] = int(step) if is_int else float(step)
    return out


def _field_type(cls: type, field: str) -> Any:
    (f,) = [f for f in dataclasses.fields(cls) if f.name == field]
    return f.type


def normalize(space: Any, method: str) -> dict[str, Any]:
    """The space with full setting names: each a list of values or a range dict."""
    if not isinstance(space, dict) or not space:
        raise SweepError("space must be a dict from setting names to values or ranges, e.g. "
                         "{'learning_rate': [1e-4, 3e-4], 'r': [8, 16]}.")  # fmt: skip
    out: dict[str, Any] = {}
    for name, values in space.items():
        full = full_name(name, method)
        if full in out:
            raise SweepError(f"{name!r} names {full}, which the space has already.")
        _, field, cls = setting_names(method)[full]
        is_int = "int" in str(_field_type(cls, field)) and "float" not in str(
            _field_type(cls, field)
        )
        if _is_range(values):
            out[full] = _check_range(full, values, is_int)
            continue
        if isinstance(values, str) or not isinstance(values, list | tuple):
            raise SweepError(f"{full} needs a list of values or a range dict "
                             f"{{'low': ..., 'high': ...}}, got {values!r}.")  # fmt: skip
        listed = list(values)
        if not listed:
            raise SweepError(f"{full} has no values: give at least one (two to compare).")
        if any(isinstance(v, list | dict | tuple) for v in listed):
            raise SweepError(f"{full}'s values must be plain numbers, text or True/False.")
        if len(set(map(repr, listed))) < len(listed):
            raise SweepError(f"{full} lists a value twice: {listed}.")
        out[full] = listed
    return out


def corners(space: dict[str, Any]) -> list[dict[str, Any]]:
    """Values to try against the base spec: every listed value, and each range's ends."""
    out = []
    for name, values in space.items():
        for v in [values["low"], values["high"]] if _is_range(values) else values:
            out.append({name: v})
    return out


def apply(base: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """The base spec's dict (`RunSpec.to_dict()`) with `params` (full names) set."""
    values = {**base, **{g: dict(base.get(g) or {}) for g in ("args", "lora", "method_args")}}
    for name, value in params.items():
        group, field = name.split(".", 1)
        values[group][field] = value
    return values


def check_values(base: dict[str, Any], space: dict[str, Any]) -> None:
    """Refuse a value the settings refuse, naming the setting and the value."""
    for params in corners(space):
        try:
            RunSpec.from_dict(apply(base, params))
        except (SettingsError, TypeError, ValueError) as e:
            ((name, value),) = params.items()
            raise SweepError(f"{name} = {value!r} is refused by the run's settings: {e}") from e


def check_sampler(sampler: Any, space: dict[str, Any], n_trials: Any) -> int:
    """The number of trials to run (a grid's size at most); refuses a bad sampler or count."""
    if sampler not in SAMPLERS:
        raise SweepError(f"sampler must be one of {', '.join(SAMPLERS)}; got {sampler!r}.")
    grid = 1
    for name, values in space.items():
        if _is_range(values):
            if sampler == "grid":
                raise SweepError(f"A grid needs values to list: {name} has a range. Give it a "
                                 "list of values, or use sampler='tpe' or 'random'.")  # fmt: skip
            grid = 0
        else:
            grid *= len(values)
    if n_trials is None:
        if sampler == "grid":
            return grid
        raise SweepError(f"n_trials is needed for the {sampler} sampler (a range has no end); "
                         "for example n_trials=8.")  # fmt: skip
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise SweepError(f"n_trials must be a whole number of at least 1, got {n_trials!r}.")
    if sampler == "grid" and n_trials > grid:
        raise SweepError(f"The grid has {grid} points; n_trials={n_trials} would repeat some. "
                         f"Use n_trials={grid} (or leave it out).")  # fmt: skip
    return n_trials


def objectives(spec: RunSpec, judge: bool = False) -> list[str]:
    """The figures a run of this spec produces that a sweep can optimize."""
    row = METHODS[spec.method]
    out = [m for m in row.metrics if m not in NOT_OBJECTIVES and m != EACH_REWARD]
    if EACH_REWARD in row.metrics:
        names = [r.get("name") for r in spec.method_args_dict().get("rewards", [])]
        out += [f"reward_{n}" for n in names if n]
    out.append("train_loss")
    if judge:
        out += JUDGE_OBJECTIVES
    return out


def check_objective(objective: Any, spec: RunSpec, judge: bool) -> str:
    """ "minimize" or "maximize" for `objective`; refused when this method never produces it."""
    if not isinstance(objective, str) or not objective.strip():
        raise SweepError(f"objective must be the name of a figure, got {objective!r}.")
    known = objectives(spec, judge)
    if objective.startswith("metric_"):
        name = objective.removeprefix("metric_")
        if name not in metrics():
            raise SweepError(f"{objective}: no built-in task metric {name!r}; choose from "
                             f"{', '.join('metric_' + m for m in metrics())}.")  # fmt: skip
    elif objective in JUDGE_OBJECTIVES and not judge:
        raise SweepError(f"{objective} needs a judge: pass judge= (a local model id or run, or "
                         "an LLM such as dragon.judge_anthropic()).")  # fmt: skip
    elif objective not in known:
        raise SweepError(f"A {spec.method} run does not produce {objective!r}. It produces: "
                         f"{', '.join(known)}, or a task metric (metric_<name>).")  # fmt: skip
    direction = better(objective)
    if direction is None:
        raise SweepError(f"{objective} has no better end (neither lower nor higher is best); "
                         f"choose one of {', '.join(known)}.")  # fmt: skip
    return "minimize" if direction == "lower" else "maximize"


def check_prune(prune: Any, objective: str) -> bool:
    """Whether the pruner watches the trials: None is 'where the objective is logged while
    training'; True for one that is not is refused."""
    if prune is None:
        return objective in PRUNED_ON
    if not isinstance(prune, bool):
        raise SweepError(f"prune must be True, False or None (automatic), got {prune!r}.")
    if prune and objective not in PRUNED_ON:
        raise SweepError(f"prune=True needs an objective the trainer logs while it trains "
                         f"({', '.join(PRUNED_ON)}); {objective} is known only at the end. "
                         "Use prune=False.")  # fmt: skip
    return prune


def total_steps(args: Any, n_train: int) -> int:
    """The optimizer steps a run of these TrainArgs takes on `n_train` rows (one device)."""
    per_epoch = math.ceil(n_train / (args.batch_size * args.grad_accum))
    return int(args.max_steps or math.ceil(per_epoch * args.epochs))


def warmup_steps(total: int) -> int:
    """The steps before which the pruner never stops a trial of `total` steps."""
    return int(total * PRUNER_WARMUP)
