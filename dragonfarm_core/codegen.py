"""The Python, through the public API, that reproduces a run: `code(run)`, from a `RunSpec`.

    print(dragon.code(run))

One generator, `spec_code(spec)`, writes every training script: `code(run)` reads the spec back
from config.json (so it works for runs started from the app, from another session or from the
command line) and the Train tab passes the spec its widgets describe, so the code shown before
Start is the code of the run it starts. The dataset is rebuilt from its original file (or the
copy saved in the run when it came from memory); only settings that differ from their defaults
are written; a run that continued from another refers to it by directory. `dry_run_code` is the
`dragon.test_rewards(...)` script of the Train tab's dry run, with the same parts.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from dragonfarm_core.data.codegen import dataset_code, literal
from dragonfarm_core.method_args import GrpoArgs
from dragonfarm_core.methods import METHODS
from dragonfarm_core.rewards import Reward, reward_names
from dragonfarm_core.rundir import files, location
from dragonfarm_core.rundir.run import Run, open_run
from dragonfarm_core.settings import TrainArgs, to_dict
from dragonfarm_core.spec import GROUPS, RunSpec, is_run_folder


def _value(value: Any) -> str:
    """A Python literal: strings in double quotes (like the dataset line), the rest as repr."""
    return literal(value) if isinstance(value, str | int | float) else repr(value)


def _settings_call(cls: type, stored: dict[str, Any]) -> str | None:
    """`dragon.Lora(r=8)` for the fields that differ from the defaults; None if none do."""
    defaults = to_dict(cls())
    names = [f.name for f in dataclasses.fields(cls)]
    parts = [
        f"{k}={_value(v)}"
        for k, v in stored.items()
        if k in names and k != "extra" and v != defaults.get(k)
    ]
    extra = stored.get("extra") or {}
    if all(k.isidentifier() and k not in names for k in extra):
        parts += [f"{k}={_value(v)}" for k, v in extra.items()]  # unknown keywords land in extra
    else:
        parts.append(f"extra={_value(extra)}")
    return f"dragon.{cls.__name__}({', '.join(parts)})" if parts else None


def _given_names(stored: list[dict[str, Any]]) -> set[int]:
    """Indexes of the rewards whose name must be written: those that `assign_names` would not
    give them again (names of the others are left out of the code)."""
    keep: set[int] = set()
    while True:
        shapes = [SimpleNamespace(type=d["type"], name=d.get("name") if i in keep else None)
                  for i, d in enumerate(stored)]  # fmt: skip
        automatic = reward_names(shapes)  # type: ignore[arg-type]
        wrong = {i for i, d in enumerate(stored) if automatic[i] != d.get("name")} - keep
        if not wrong:
            return keep
        keep |= wrong


def rewards_code(
    stored: list[dict[str, Any]], run_dir: str | os.PathLike[str] | None = None
) -> str:
    """The `[dragon.reward(...), ...]` source that rebuilds config.json's rewards.

    Only fields that differ from the defaults are written, names only where they were chosen,
    a custom file stored relative to `run_dir` as the absolute path of the run's copy. Built from
    the stored dicts without validating them again (a command's program may be missing here).
    """
    defaults = {f.name: f.default for f in dataclasses.fields(Reward)}
    named = _given_names(stored)
    calls = []
    for i, d in enumerate(stored):
        parts = [literal(d["type"])]
        for key, value in d.items():
            if key == "type" or value == defaults.get(key) or (key == "name" and i not in named):
                continue
            if key == "file" and value and not os.path.isabs(value) and run_dir is not None:
                value = str(Path(run_dir) / value)
            parts.append(f"{key}={literal(value) if isinstance(value, str) else repr(value)}")
        calls.append(f"dragon.reward({', '.join(parts)})")
    if len(calls) == 1:
        return f"[{calls[0]}]"
    return "[\n" + "".join(f"        {c},\n" for c in calls) + "    ]"  # one per line in the call


def _runs_dir_argument(runs_dir: str | os.PathLike[str] | None) -> str | None:
    """runs_dir= only when the runs live somewhere other than the configured default."""
    if runs_dir is None:
        return None
    home = Path(runs_dir)
    if home == location.configured_runs_dir() or location.looks_temporary(home):
        return None
    return str(home)


def _head(dataset: dict[str, Any], model: str) -> tuple[list[str], str]:
    """The import, the dataset line, `parent = dragon.open_run(...)` when continuing a run;
    and how the call names the model."""
    lines = ["import dragonfarm_core as dragon", "", dataset_code(dataset, var="ds").rstrip()]
    if not is_run_folder(model):
        return lines, literal(model)
    return [*lines, f"parent = dragon.open_run({literal(model)})"], "parent"


def _script(head: list[str], target: str, function: str, arguments: list[str]) -> str:
    call = "".join(f"    {a},\n" for a in arguments)
    return "\n".join([*head, "", f"{target} = dragon.{function}(\n{call})", ""])


def _call_arguments(spec: RunSpec, model: str, runs_dir: Any) -> list[str]:
    row = spec.row
    args = ["ds", model]
    if sum(r.function == row.function for r in METHODS.values()) > 1:
        args.append(f"method={literal(spec.method)}")  # one function starts several methods
    args += [
        f"rewards={rewards_code(v)}" if k == "rewards" else f"{k}={_value(v)}"
        for k, v in spec.method_args_dict().items()
    ]
    for key, cls in GROUPS:
        value = getattr(spec, key)
        default = row.default_args if cls is TrainArgs else cls()
        if value != default:  # TrainArgs() itself, when the method's defaults differ from it
            args.append(
                f"{key}={_settings_call(cls, to_dict(value)) or f'dragon.{cls.__name__}()'}"
            )
    if spec.name:
        args.append(f"name={literal(spec.name)}")
    home = _runs_dir_argument(runs_dir)
    if home:
        args.append(f"runs_dir={literal(home)}")
    if spec.n_samples != 10:
        args.append(f"n_samples={spec.n_samples}")
    if spec.revision and model != "parent":
        args.append(f"revision={literal(spec.revision)}")
    if spec.trust_remote_code:
        args.append("trust_remote_code=True")
    return args


def spec_code(spec: RunSpec, runs_dir: str | os.PathLike[str] | None = None) -> str:
    """Python source that starts the run `spec` describes, in `runs_dir` (written only when it
    is not the configured default)."""
    head, model = _head(spec.dataset_dict(), spec.model)
    return _script(head, "run", spec.row.function, _call_arguments(spec, model, runs_dir))


def dry_run_code(dataset: Any, model: str, settings: GrpoArgs, max_prompts: int) -> str:
    """The Python of a dry run: `dragon.test_rewards` with the rewards, model, prompts and
    sampling settings GRPO would use."""
    spec = dataset if isinstance(dataset, dict) else dataset.spec()
    head, model_arg = _head(spec, model)
    arguments = [
        rewards_code(list(settings.rewards)), model_arg, "ds", f"n={settings.group_size}",
        f"max_new_tokens={settings.max_new_tokens}",
        f"temperature={literal(settings.temperature)}", f"max_prompts={max_prompts}",
    ]  # fmt: skip
    return _script(head, "table", "test_rewards", arguments) + "print(table)\n"


def code(run: Run | str | os.PathLike[str]) -> str:
    """Python source that reproduces `run` (a Run, its directory, or its id)."""
    run = open_run(run)
    config = run.config
    if config.get("method", "sft") not in METHODS:
        raise ValueError(
            f"{run.dir / files.CONFIG}: unknown method {config.get('method')!r}; "
            "cannot write code for it."
        )
    home = run.dir.parent
    if home.name == files.ARCHIVED_DIR:
        home = home.parent
    return spec_code(RunSpec.from_dict(config, run_dir=run.dir), home)
