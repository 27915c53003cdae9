"""The Python the Train tab shows before there is a run: the call Start makes, and the dry run's.

Both start from the mapped dataset's own code (`ds = ...`) and, when training on top of a
finished run, `parent = dragon.open_run(...)`. Method arguments and rewards are written the way
`dragon.code(run)` writes them (rewards named, files absolute), so the code shown before Start
is the code of the run it starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dragonfarm_core as dragon
from dragonfarm_core.data.codegen import dataset_code, literal
from dragonfarm_core.models import ResolvedModel
from dragonfarm_core.reinforcement import ReinforceArgs, rewards_code
from dragonfarm_core.rewards import Reward, assign_names
from dragonfarm_core.rundir import location
from dragonfarm_core.settings import Hardware, Lora, TrainArgs
from ui import present


def _rewards_literal(rewards: Sequence[Reward]) -> str:
    """`[dragon.reward(...), ...]` as reinforce() will store them (named, files absolute)."""
    return rewards_code([r.to_dict() for r in assign_names(list(rewards))], Path.cwd())


def _call(function: str, arguments: Sequence[str]) -> str:
    return f"dragon.{function}(\n" + "".join(f"    {a},\n" for a in arguments) + ")\n"


def _head(mapped: dragon.Dataset, parent: str | None) -> str:
    lines = [dataset_code(mapped.spec(), var="ds").rstrip()]
    if parent:
        lines.append(f"parent = dragon.open_run({literal(parent)})")
    return "\n".join(lines) + "\n\n"


def _method_literals(method_args: dict[str, Any]) -> list[str]:
    """The method's arguments as `dragon.code(run)` writes them."""
    return [
        f"rewards={_rewards_literal(value)}" if key == "rewards" else f"{key}={literal(value)}"
        for key, value in method_args.items()
    ]


def train_code(
    mapped: dragon.Dataset,
    model: ResolvedModel,
    parent: str | None,
    settings: tuple[Lora, TrainArgs, Hardware],
    name: str | None,
    runs_dir: Path,
    function: str = "train",
    method_args: dict[str, Any] | None = None,
) -> str:
    """The Python that starts the same run as the Start button: `function` (the method's API
    function, `train`, `prefer` or `reinforce`) called with the method's arguments."""
    call = ["ds", "parent" if parent else literal(model.name)]
    call += _method_literals(method_args or {})
    for key, value in zip(("lora", "args", "hardware"), settings, strict=True):
        setting = present.settings_call(value)
        call += [f"{key}={setting}"] if setting else []
    call += [f"name={literal(name)}"] if name else []
    call += (
        [f"runs_dir={literal(str(runs_dir))}"] if runs_dir != location.configured_runs_dir() else []
    )
    call += [f"revision={literal(model.revision)}"] if model.revision and not parent else []
    return present.python_code(_head(mapped, parent) + "run = " + _call(function, call))


def dry_run_code(
    mapped: dragon.Dataset, model: ResolvedModel, parent: str | None,
    rewards: Sequence[Reward], settings: ReinforceArgs, max_prompts: int,
) -> str:  # fmt: skip
    """The Python of a dry run: the same rewards, model, prompts and sampling."""
    arguments = [
        _rewards_literal(rewards),
        "parent" if parent else literal(model.name),
        "ds",
        f"n={settings.group_size}",
        f"max_new_tokens={settings.max_new_tokens}",
        f"temperature={literal(settings.temperature)}",
        f"max_prompts={max_prompts}",
    ]
    body = _head(mapped, parent) + "table = " + _call("test_rewards", arguments) + "print(table)"
    return present.python_code(body)
