"""One execution of a pipeline, as its steps see it: the `Context` (the record, the runs dir,
the latest run and pairs of the chain), and `watch_run`, which waits for a training step's
run and cancels it when the pipeline is asked to stop.

Shared by the runner (`pipelines.runner`, which makes the context and runs the steps) and
the steps' work (`pipelines.work`, which reads and moves the chain along).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dragonfarm_core.rundir import files
from dragonfarm_core.rundir import pipeline_record as record_io
from dragonfarm_core.rundir.run import Run

POLL_S = 0.2
CANCEL_TIMEOUT_S = 120.0


class PipelineCancelled(Exception):
    """Raised by a step that stopped because the pipeline was asked to stop."""


@dataclass
class Context:
    """One execution of a pipeline: its record, runs dir, and what the chain holds."""

    path: Path
    runs_dir: Path
    name: str
    model: str
    run: Run | None = None
    pairs: Any = None
    echo: Callable[[str], None] = field(default=print)

    @property
    def target(self) -> Any:
        """What the next training step starts from: the latest run, else the model."""
        return self.run if self.run is not None else self.model

    def cancel_requested(self) -> bool:
        return files.cancel_requested(record_io.folder(self.path))

    def log(self, message: str) -> None:
        line = f"[pipeline] {files.now_iso()} {message}"
        with open(record_io.log_path(self.path), "a", encoding="utf-8") as log:
            log.write(line + "\n")
        self.echo(line)


def watch_run(ctx: Context, run: Run) -> Run:
    """Wait for a training run; cancel it (a checkpoint first) when the pipeline is asked to
    stop, or when this process is interrupted in the foreground."""
    try:
        while run.status().get("state") in files.ACTIVE_STATES:
            if ctx.cancel_requested():
                ctx.log(f"cancelling run {run.id} (it saves a checkpoint first)")
                run.cancel(timeout=CANCEL_TIMEOUT_S)
                raise PipelineCancelled
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        run.cancel(timeout=CANCEL_TIMEOUT_S)
        raise
    return run.wait(poll=POLL_S)  # raises RunFailedError, with the log tail, unless it succeeded
