"""`code(run)`: the Python, through the public API, that reproduces a run.

    print(dragon.code(run))

Derived from config.json alone, so it works for runs started from the app, from another session
or from the command line. The dataset is rebuilt from its original file (or the copy saved in
the run when it came from memory); only settings that differ from their defaults are written; a
run that continued from another refers to it by directory.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from dragonfarm_core.data.codegen import dataset_code, literal
from dragonfarm_core.reinforcement import rewards_code
from dragonfarm_core.rundir import files, location
from dragonfarm_core.rundir.create import slugify
from dragonfarm_core.rundir.run import Run, open_run
from dragonfarm_core.settings import Hardware, Lora, TrainArgs, to_dict

FUNCTIONS = {
    "sft": "dragon.train",
    "dpo": "dragon.prefer",
    "orpo": "dragon.prefer",
    "grpo": "dragon.reinforce",
}


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


def _runs_dir_argument(run_dir: Path) -> str | None:
    """runs_dir= only when the run lives somewhere other than the configured default."""
    home = run_dir.parent
    if home.name == files.ARCHIVED_DIR:
        home = home.parent
    if home == location.configured_runs_dir() or location.looks_temporary(home):
        return None
    return str(home)


def _call_arguments(config: dict[str, Any], run_dir: Path) -> list[str]:
    method = config["method"]
    model = config["model"]
    args = ["ds", "parent" if config.get("continued_from") else literal(model["name"])]
    if method in ("dpo", "orpo"):
        args.append(f"method={literal(method)}")
    args += [
        f"rewards={rewards_code(v, run_dir)}" if k == "rewards" else f"{k}={_value(v)}"
        for k, v in (config.get("method_args") or {}).items()
    ]
    for key, cls in (("lora", Lora), ("args", TrainArgs), ("hardware", Hardware)):
        call = _settings_call(cls, config.get(key) or {})
        if call:
            args.append(f"{key}={call}")
    if config.get("name") and config["name"] != slugify(model["name"]):
        args.append(f"name={literal(config['name'])}")
    runs_dir = _runs_dir_argument(run_dir)
    if runs_dir:
        args.append(f"runs_dir={literal(runs_dir)}")
    if config.get("n_samples", 10) != 10:
        args.append(f"n_samples={config['n_samples']}")
    if model.get("revision") and not config.get("continued_from"):
        args.append(f"revision={literal(model['revision'])}")
    if model.get("trust_remote_code"):
        args.append("trust_remote_code=True")
    return args


def code(run: Run | str | os.PathLike[str]) -> str:
    """Python source that reproduces `run` (a Run, its directory, or its id)."""
    run = open_run(run)
    config = run.config
    method = config.get("method", "sft")
    if method not in FUNCTIONS:
        raise ValueError(
            f"{run.dir / files.CONFIG}: unknown method {method!r}; cannot write code for it."
        )
    lines = [
        "import dragonfarm_core as dragon",
        "",
        dataset_code(config["dataset"], var="ds").rstrip(),
    ]
    if config.get("continued_from"):
        lines.append(f"parent = dragon.open_run({literal(config['continued_from'])})")
    call_args = "".join(f"    {a},\n" for a in _call_arguments(config, run.dir))
    lines += ["", f"run = {FUNCTIONS[method]}(\n{call_args})", ""]
    return "\n".join(lines)
