"""The background form of the export steps after a merge (Ollama, the Hub): start, watch, wait.

    pending = start_serve_ollama(run, name="support")      # or start_publish(run, repo, token=...)
    pending.state, pending.logs(20), pending.cancel()
    pending.wait()      # the step's result (a dict), or its error with the log's tail

Each step is an ordinary job of the job runner (`rundir.jobs`): a folder <run>/jobs/<kind>-<time>/
with status, log and heartbeat, a process of its own (`python -m <module> RUN --job JOB ...`).
The process writes what it produced into the folder as result.json (`run_step`), so the app and
a later session read the same outcome. The Python API calls run the same work in-process
(`serve_ollama`, `publish`); the app starts jobs, so its page stays responsive and a step
outlives the page. Pure standard library.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dragonfarm_core.rundir import files, jobs
from dragonfarm_core.rundir.run import Run

RESULT = "result.json"
CANCEL_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ExportJob:
    """An export step under way: `state`, `logs()`, `cancel()`, `result()` (None until it has
    succeeded) and `wait()`, the result once the job has succeeded."""

    run: Run
    job: jobs.Job
    # What the step does, for messages ("Registering run X with Ollama").
    doing: str
    error: type[Exception] = RuntimeError

    @property
    def state(self) -> str | None:
        return self.job.status().get("state")

    def status(self) -> dict[str, Any]:
        return self.job.status()

    def logs(self, n: int = 20) -> list[str]:
        return self.job.logs(n)

    def cancel(self, timeout: float = CANCEL_TIMEOUT_S) -> ExportJob:
        self.job.cancel(timeout)
        return self

    def result(self) -> dict[str, Any] | None:
        """What the step produced (result.json), once it has succeeded."""
        value = files.read_json(self.job.dir / RESULT)
        return value if isinstance(value, dict) else None

    def wait(self, timeout: float | None = None) -> dict[str, Any]:
        """Block until the job ends: its result, or `error` naming why it did not succeed
        (with the log's tail); TimeoutError after `timeout` s (the job keeps going)."""
        status = self.job.wait(None if timeout is None or math.isinf(timeout) else timeout)
        state = status.get("state")
        result = self.result()
        if state == "succeeded" and result is not None:
            return result
        if state == "cancelled":
            message = f"{self.doing} was cancelled."
        elif state == "succeeded":
            message = f"{self.doing} ended without writing its result ({RESULT})."
        else:
            message = f"{self.doing} {jobs.failure(status)}"
        raise self.error(jobs.with_log_tail(message, status, self.job))


def start_step(
    run: Run,
    kind: str,
    module: str,
    arguments: list[str],
    *,
    doing: str,
    error: type[Exception],
    stdin: bytes | None = None,
) -> ExportJob:
    """Start `python -m module RUN_DIR --job JOB_DIR *arguments` as a `kind` job on the run.
    `stdin`: bytes the process reads first (a secret goes there, never into argv or a file)."""
    job = jobs.start_on_run(
        run.dir,
        kind,
        lambda job_dir: [
            sys.executable,
            "-m",
            module,
            str(run.dir),
            "--job",
            str(job_dir),
            *arguments,
        ],
        device=None,  # network and file work; a merge it needs queues for the device itself
        error=error,
        stdin=stdin,
    )
    return ExportJob(run, job, doing, error)


def run_step(job_dir: str | os.PathLike[str], work: Callable[[], dict[str, Any]]) -> int:
    """In the step's process: run `work()` as the job in `job_dir`, its result into result.json."""

    def step() -> None:
        files.write_json(Path(job_dir) / RESULT, work())

    return jobs.run_job(job_dir, step)
