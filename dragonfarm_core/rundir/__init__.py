"""Runs: the run-directory contract (files), creating and launching runs, the queue, and the
`Run` object and runs table.

Names load on first use: the trainer subprocess imports `dragonfarm_core.rundir.files` and
`.queue` while it waits its turn, and must not pay for pandas there.
"""

from __future__ import annotations

import importlib
from typing import Any

_API: dict[str, str] = {
    "Run": "dragonfarm_core.rundir.run",
    "RunFailedError": "dragonfarm_core.rundir.run",
    "open_run": "dragonfarm_core.rundir.run",
    "runs": "dragonfarm_core.rundir.store",
    "archived_runs": "dragonfarm_core.rundir.store",
    "archive_run": "dragonfarm_core.rundir.store",
    "unarchive_run": "dragonfarm_core.rundir.store",
    "delete_run": "dragonfarm_core.rundir.store",
    "runs_dir": "dragonfarm_core.rundir.location",
    "set_runs_dir": "dragonfarm_core.rundir.location",
    "create_run": "dragonfarm_core.rundir.create",
    "start_run": "dragonfarm_core.rundir.launch",
    "cancel_run": "dragonfarm_core.rundir.launch",
    "live_status": "dragonfarm_core.rundir.launch",
}

__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'dragonfarm_core.rundir' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
