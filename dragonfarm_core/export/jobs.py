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

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dragonfarm_core.rundir import files, job_handle, jobs
from dragonfarm_core.rundir.job_handle import JobHandle, ended_without, wait_status
from dragonfarm_core.rundir.run import Run

RESULT = "result.json"
CANCEL_TIMEOUT_S = job_handle.CANCEL_TIMEOUT_S


@dataclass(frozen=True)
class ExportJob(JobHandle):
    """An export step under way: `state`, `logs()`, `cancel()`, `result()` (None until it has
    succeeded) and `wait()`, the result once the job has succeeded."""

    run: Run
    job: jobs.Job
    # What the step does, for messages ("Registering run X with Ollama").
    doing: str
    error: type[Exception] = RuntimeError

    def status(self) -> dict[str, Any]:
        return self.job.status()

    def result(self) -> dict[str, Any] | None:
        """What the step produced (result.json), once it has succeeded."""
        value = files.read_json(self.job.dir / RESULT)
        return value if isinstance(value, dict) else None

    def wait(self, timeout: float | None = None) -> dict[str, Any]:
        """Block until the job ends: its result, or `error` naming why it did not succeed
        (with the log's tail); TimeoutError after `timeout` s (the job keeps going)."""
        status = wait_status(self.job, timeout)
        result = self.result()
        if status.get("state") == "succeeded" and result is not None:
            return result
        raise ended_without(
            self.job, status, self.error, doing=self.doing,
            cancelled=f"{self.doing} was cancelled.",
            missing=f"{self.doing} ended without writing its result ({RESULT}).",
        )  # fmt: skip


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


def step_parser(module: str, description: str) -> argparse.ArgumentParser:
    """The command line every step takes: the run folder and --job; the step adds its own."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument("run_dir")
    parser.add_argument("--job", help="run as the job in this folder")
    return parser


def step_log(line: str) -> None:
    """A step's progress line in its log, marked as dragonfarm's own and flushed at once."""
    print(f"[dragonfarm] {line}", flush=True)


def run_main(job_dir: str | None, work: Callable[[], dict[str, Any]]) -> int:
    """A step's exit code: `work()` as the job in `job_dir`, or in the foreground without one."""
    if job_dir:
        return run_step(job_dir, work)
    work()
    return 0
