"""Runs: the run-directory contract (files), creating and launching runs, the queue, and the
`Run` object and runs table.

Names load on first use: the trainer subprocess imports `dragonfarm_core.runs.files` and
`.queue` while it waits its turn, and must not pay for pandas there.
"""

from __future__ import annotations

import importlib
from typing import Any

_API: dict[str, str] = {
    "Run": "dragonfarm_core.runs.run",
    "RunFailedError": "dragonfarm_core.runs.run",
    "open_run": "dragonfarm_core.runs.run",
    "runs": "dragonfarm_core.runs.store",
    "archived_runs": "dragonfarm_core.runs.store",
    "archive_run": "dragonfarm_core.runs.store",
    "unarchive_run": "dragonfarm_core.runs.store",
    "delete_run": "dragonfarm_core.runs.store",
    "runs_dir": "dragonfarm_core.runs.location",
    "set_runs_dir": "dragonfarm_core.runs.location",
    "create_run": "dragonfarm_core.runs.create",
    "start_run": "dragonfarm_core.runs.launch",
    "cancel_run": "dragonfarm_core.runs.launch",
    "live_status": "dragonfarm_core.runs.launch",
}

__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'dragonfarm_core.runs' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
