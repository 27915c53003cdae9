"""dragonfarm: a post-training studio for small language models. The public Python API.

    import dragonfarm_core as dragon
    ds = dragon.dataset(dragon.example_data()).map(prompt="{subject}\\n\\n{body}", response="reply")
    run = dragon.train(ds, "dragonfarm/tiny-support", wait=True)

Names follow the R edition's manual without the `dragon_` prefix. Each name is imported on first
use, so `import dragonfarm_core` stays fast and never pulls in torch: training and inference run
in subprocesses.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_API: dict[str, str] = {
    # data
    "dataset": "dragonfarm_core.data",
    "conversations": "dragonfarm_core.data",
    "example_data": "dragonfarm_core.data",
    "Dataset": "dragonfarm_core.data",
    "DatasetError": "dragonfarm_core.data",
    "DatasetWarning": "dragonfarm_core.data",
    "DataReport": "dragonfarm_core.data",
    "HOUSE_STYLE_PATTERN": "dragonfarm_core.data",
    # models and environment
    "presets": "dragonfarm_core.models",
    "resolve_model": "dragonfarm_core.models",
    "ModelError": "dragonfarm_core.models",
    "BUNDLED_MODEL_ID": "dragonfarm_core.models",
    "check": "dragonfarm_core.environment",
    # settings
    "Lora": "dragonfarm_core.settings",
    "TrainArgs": "dragonfarm_core.settings",
    "Hardware": "dragonfarm_core.settings",
    "SettingsError": "dragonfarm_core.settings",
    # runs
    "train": "dragonfarm_core.training",
    "resume": "dragonfarm_core.training",
    "status": "dragonfarm_core.training",
    "progress": "dragonfarm_core.training",
    "logs": "dragonfarm_core.training",
    "wait": "dragonfarm_core.training",
    "cancel": "dragonfarm_core.training",
    "Run": "dragonfarm_core.runs",
    "RunFailedError": "dragonfarm_core.runs",
    "open_run": "dragonfarm_core.runs",
    "runs": "dragonfarm_core.runs.store",
    "archived_runs": "dragonfarm_core.runs",
    "archive_run": "dragonfarm_core.runs",
    "unarchive_run": "dragonfarm_core.runs",
    "delete_run": "dragonfarm_core.runs",
    "runs_dir": "dragonfarm_core.runs",
    "set_runs_dir": "dragonfarm_core.runs",
    "code": "dragonfarm_core.codegen",
    # rewards and metrics
    "reward": "dragonfarm_core.rewards",
    "Reward": "dragonfarm_core.rewards",
    "RewardError": "dragonfarm_core.rewards",
    "metrics": "dragonfarm_core.metrics",
    "metric_regex": "dragonfarm_core.metrics",
    # preference, reinforcement, evaluation
    "prefer": "dragonfarm_core.preference",
    "reinforce": "dragonfarm_core.reinforcement",
    "test_rewards": "dragonfarm_core.reinforcement",
    "evaluate": "dragonfarm_core.evaluation",
    # inference, chat, feedback
    "generate": "dragonfarm_core.generation",
    "chat": "dragonfarm_core.chat",
    "chat_load": "dragonfarm_core.chat",
    "Chat": "dragonfarm_core.chat",
    "feedback": "dragonfarm_core.feedback",
    "backend": "dragonfarm_core.inference",
    "set_backend": "dragonfarm_core.inference",
    "backend_local": "dragonfarm_core.inference",
    "backend_server": "dragonfarm_core.inference",
    "backend_ollama": "dragonfarm_core.inference",
    "worker_stop": "dragonfarm_core.inference",
    # the app
    "app": "ui.layout",
}

__all__ = sorted(_API)

# Some public functions share their name with a module of this package: `dragon.runs()` and
# dragonfarm_core/runs/, `dragon.metrics()`, `dragon.chat()` and `dragon.feedback()` and their
# modules. Importing a submodule normally binds its name on the package, which would replace
# the function; this package refuses that binding, so these names always mean the function.
# (The modules stay importable by their full names: `from dragonfarm_core.chat import Chat`.)
_SHADOWED = frozenset({"runs", "metrics", "chat", "feedback"})


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SHADOWED and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'dragonfarm_core' has no attribute {name!r}")
    target = "build_app" if name == "app" else name
    value = getattr(importlib.import_module(module), target)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
