"""What the queue tests share: watching runs until they end."""

from __future__ import annotations

import time

from dragonfarm_core.rundir import files
from dragonfarm_core.rundir.run import Run


def watch_runs(runs: list[Run], timeout: float = 60) -> tuple[list[str], int]:
    """Poll until all runs end: (order in which they started running, most running at once)."""
    order: list[str] = []
    most = 0
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        states = {run.id: run.state for run in runs}
        running = [rid for rid, state in states.items() if state == "running"]
        most = max(most, len(running))
        order += [rid for rid in running if rid not in order]
        if all(s not in files.ACTIVE_STATES for s in states.values()):
            return order, most
        time.sleep(0.02)
    raise AssertionError(f"runs still active after {timeout} s: {states}")
