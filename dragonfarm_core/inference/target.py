"""What a person asks to talk to (a run, a run directory, a model id or folder) as weights.

A run answers with its base model, the earlier runs' adapters folded in, and its own adapter
on top; `base=True` answers with the same weights minus that last adapter. The run's files are
read only through `runs.files`. No torch here: the worker loads what this describes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dragonfarm_core.inference.protocol import ModelSpec
from dragonfarm_core.models import resolve_model
from dragonfarm_core.rundir import files


@dataclass(frozen=True)
class Target:
    """The weights to load, the name to show and record, and the run (if it is one)."""

    spec: ModelSpec | None
    name: str
    run_dir: str | None = None
    source: str | None = None
    """What to pass to `resolve_target` to get this back (saved with transcripts)."""


NO_MODEL = Target(spec=None, name="", run_dir=None, source=None)


def is_run(path: Path) -> bool:
    """A run directory, not a model folder: both have a config.json, but only a run's names
    its model in a "model" object."""
    if not files.is_run_dir(path):
        return False
    try:
        return isinstance(files.read_config(path).get("model"), dict)
    except (OSError, ValueError, AttributeError):
        return False


def run_dir_of(x: Any) -> Path | None:
    """The directory of a Run object (anything with `.dir`) or of a path to a run."""
    if hasattr(x, "dir"):
        return Path(x.dir)
    if isinstance(x, str | os.PathLike) and is_run(Path(x).expanduser()):
        return Path(x).expanduser()
    return None


def resolve_target(x: Any, base: bool = False) -> Target:
    """The weights behind `x`: a Run, a run directory, a model id, a model folder or None."""
    if x is None:
        return NO_MODEL
    run_dir = run_dir_of(x)
    if run_dir is not None:
        return _run_target(run_dir.resolve(), base)
    if not isinstance(x, str | os.PathLike):
        raise TypeError(
            f"Cannot talk to a {type(x).__name__}: pass a run, a run directory, a "
            "model id or a model folder."
        )
    resolved = resolve_model(str(x))
    spec = ModelSpec(base=resolved.base)
    return Target(spec=spec, name=resolved.name, source=str(x))


def _run_target(run_dir: Path, base: bool) -> Target:
    config = files.read_config(run_dir)
    model = config.get("model") or {}
    if not model.get("base"):
        raise ValueError(
            f"{run_dir / files.CONFIG} has no model.base: the run does not say "
            "which model it trained."
        )
    base_path = model["base"]
    if not Path(base_path).is_dir():  # a Hub id: the local cache (downloaded if needed)
        base_path = resolve_model(base_path, model.get("revision")).base
    adapters = tuple(str(a) for a in model.get("adapters") or ())
    for a in adapters:
        if not Path(a).is_dir():
            raise ValueError(
                f"{run_dir.name} continues from the adapter {a}, which is gone; "
                "restore that run, or talk to its base with a model id instead."
            )
    adapter = run_dir / files.ADAPTER_DIR
    if not (adapter / "adapter_config.json").is_file():
        if not base:
            state = files.read_status(run_dir).get("state", "unknown")
            raise ValueError(
                f"Run {run_dir.name} has no trained adapter yet (state: {state}; "
                f"looked in {adapter}). Wait for it to finish, or pass base=True "
                "to talk to its base model."
            )
        adapter_path = None
    else:
        adapter_path = str(adapter)
    spec = ModelSpec(
        base=str(base_path),
        adapters=adapters,
        adapter=adapter_path,
        use_adapter=not base,
        trust_remote_code=bool(model.get("trust_remote_code", False)),
    )
    name = config.get("id") or run_dir.name
    return Target(
        spec=spec,
        name=f"{name} (base)" if base else name,
        run_dir=str(run_dir),
        source=str(run_dir),
    )
