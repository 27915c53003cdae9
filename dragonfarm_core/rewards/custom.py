"""The "custom" reward: a Python file that defines `reward(prompt, completion, reference, row)`.

The file is checked when the reward is created (it exists, runs, and defines a callable with
that signature) so a typo fails before training, not at step 500; the app checks it, and
dry-runs it, in the reward helper (`custom_run`), never in its own process. A run keeps its own copy of the
file (`copy_into`), so the run still works after the original is edited or deleted.

The function may return any finite number (custom rewards are not clipped to [0, 1]).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import shutil
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from dragonfarm_core.rewards.errors import RewardError
from dragonfarm_core.rundir.files import REWARDS_DIR

RewardFn = Callable[[Any, str, Any, Any], Any]


def load_function(file: str | Path, fn: str = "reward") -> RewardFn:
    """Import `file` and return its function `fn`, checked; RewardError says what is wrong."""
    path = Path(file)
    if not path.is_file():
        raise RewardError(
            f"Reward.file {str(path)!r} does not exist; give the path of a Python "
            f"file that defines {fn}(prompt, completion, reference, row)."
        )
    return _load(str(path.resolve()), path.stat().st_mtime_ns, fn)


@cache
def _load(path: str, mtime_ns: int, fn: str) -> RewardFn:
    # Keyed by mtime so an edited file is imported again; a unique module name per file and
    # version keeps two reward files with the same name apart.
    digest = hashlib.sha1(f"{path}:{mtime_ns}".encode()).hexdigest()[:12]
    module_name = f"dragonfarm_custom_reward_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise RewardError(f"Reward.file {path!r} cannot be imported; it must be a .py file.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look the module up here
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(module_name, None)
        raise RewardError(f"Reward.file {path!r} failed to import: {type(e).__name__}: {e}") from e
    func = getattr(module, fn, None)
    if not callable(func):
        raise RewardError(
            f"Reward.file {path!r} defines no function {fn!r} (Reward.fn); define "
            f"def {fn}(prompt, completion, reference, row): return a number."
        )
    try:
        inspect.signature(func).bind("prompt", "completion", "reference", {})
    except (TypeError, ValueError) as e:
        raise RewardError(
            f"Reward.fn {fn!r} in {path!r} must accept four arguments "
            f"(prompt, completion, reference, row): {e}"
        ) from e
    return func


def copy_file(file: str | Path, run_dir: str | Path, name: str) -> Path:
    """Copy the reward file to <run_dir>/rewards/<name>.py and return the copy's path."""
    target = Path(run_dir) / REWARDS_DIR / f"{name}.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    if Path(file).resolve() == target.resolve():
        return target.resolve()
    if target.exists() and target.read_bytes() != Path(file).read_bytes():
        # two unnamed custom rewards would both be "custom": name them first (assign_names)
        raise RewardError(
            f"{target} already holds another reward's code; give each custom reward its own "
            "name (Reward.name) before copying it into the run."
        )
    shutil.copyfile(file, target)
    return target.resolve()
