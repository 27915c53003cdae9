"""Judge and synthesis batches as jobs: what the app starts, so its process never waits on them.

    job = llm_jobs.start_judge(run, judge_llm, against="base", n=20)   # returns at once
    job.state; job.progress(); job.logs(20); job.cancel(); job.wait()
    result = job.result()                                                # the Judgement

The launcher writes the job's spec.json (the work's arguments; every LLM as its `describe()`,
which never holds a key) into the job folder and starts `python -m dragonfarm_core.batches.jobs
JOB_DIR` through the one job runner (`rundir.jobs`). A key (typed in the app, or read from the
app's environment, which the allow-listed child environment does not pass) is handed to the
child on its stdin, as JSON, and kept in its memory only: never in argv, the environment, a
file or a log (the child's output is scrubbed of it too).

The child (`llm_job_child`) reads the spec, rebuilds the LLMs (`llm_descriptions`) and runs
the handler its `kind` names in KINDS, inside `jobs.run_job` (status, heartbeat, cancel by
SIGINT); this module is its entry point and the launcher.

A job works on a run (<run>/jobs/<kind>-<time>/, `jobs.start_on_run`), or, for work that has
no run (a synthesis from a dataset), in <runs_dir>/jobs/<kind>-<time>/ (`start`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dragonfarm_core.batches.child import JUDGE_KIND, KINDS, SPEC, run_child
from dragonfarm_core.batches.synthesis import job_result
from dragonfarm_core.judging.judgement import check_judgeable, read_judgement
from dragonfarm_core.llm import LLM
from dragonfarm_core.llm.descriptions import api_key_of, llm_from_description
from dragonfarm_core.rundir import files, jobs, location, queue
from dragonfarm_core.rundir.run import Run, open_run
from dragonfarm_core.rundir.store import run_home

CANCEL_TIMEOUT_S = 10.0


@dataclass(frozen=True, eq=False)
class LLMJob:
    """A judge or synthesis batch under way (see the module docstring)."""

    kind: str
    job: jobs.Job
    run: Run | None = None

    def status(self) -> dict[str, Any]:
        return self.job.status()

    @property
    def state(self) -> str | None:
        return self.status().get("state")

    @property
    def done(self) -> bool:
        return self.state not in files.ACTIVE_STATES

    def logs(self, n: int = 20) -> list[str]:
        return self.job.logs(n)

    def progress(self) -> dict[str, Any] | None:
        """The latest progress row: {"done", "total", "stage", "at"}; None before the first."""
        rows = files.read_progress(self.job.dir)
        return rows[-1] if rows else None

    def cancel(self, timeout: float = CANCEL_TIMEOUT_S) -> LLMJob:
        self.job.cancel(timeout)
        return self

    def wait(self, timeout: float | None = None, poll: float = 0.2) -> dict[str, Any]:
        """Block until the job ends; its final status (TimeoutError after `timeout` s)."""
        return self.job.wait(None if timeout is None or math.isinf(timeout) else timeout, poll)

    def failure(self) -> str | None:
        """Why it did not succeed, with the log's tail; None while it runs or once it did."""
        status = self.status()
        state = status.get("state")
        if state == "succeeded" or state in files.ACTIVE_STATES:
            return None
        ended = "was cancelled." if state == "cancelled" else jobs.failure(status)
        return jobs.with_log_tail(f"The {self.kind} job {ended}", status, self.job)

    def result(self) -> Any:
        """What the job made: for a judge job, the run's Judgement. RuntimeError while it runs
        or when it did not succeed."""
        state = self.state
        if state in files.ACTIVE_STATES:
            raise RuntimeError(f"The {self.kind} job is still {state}; wait for it (.wait()).")
        problem = self.failure()
        if problem:
            raise RuntimeError(problem)
        reader = RESULTS.get(self.kind)
        if reader is None:
            return None
        return reader(self)


def _command(job_dir: Path) -> list[str]:
    return [sys.executable, "-m", "dragonfarm_core.batches.jobs", str(job_dir)]


def _secrets(keys: dict[str, str | None]) -> bytes:
    return json.dumps({k: v for k, v in keys.items() if v}).encode()


def start(
    kind: str,
    spec: dict[str, Any],
    *,
    run: Run | str | os.PathLike[str] | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
    keys: dict[str, str | None] | None = None,
    device: str | None = None,
) -> LLMJob:
    """Start a `kind` job (a key of KINDS) with `spec` as its spec.json; returns at once.

    run: the run it works on (its folder then holds the job; one job of a kind per run);
    without one the job lives in <runs_dir>/jobs/. keys: secrets by name (e.g. {"judge": key}),
    handed over on stdin; `spec` must hold none. device: the queue key the job waits for."""
    if kind not in KINDS:
        raise ValueError(f"Unknown job kind {kind!r}; one of {', '.join(KINDS)}.")
    opened = open_run(run) if run is not None else None
    home = run_home(opened.dir) if opened is not None else location.runs_dir(runs_dir)
    # The child works in the same runs dir (its response cache lives there).
    body = {**spec, "kind": kind, "runs_dir": str(home)}
    secrets = [v for v in (keys or {}).values() if v]
    text = json.dumps(body)
    if any(secret in text for secret in secrets):
        raise ValueError("A job's spec must not hold a key: pass it in keys= (it goes on stdin).")
    stdin = _secrets(keys or {})

    def command(job_dir: Path) -> list[str]:
        files.write_json(job_dir / SPEC, body)
        return _command(job_dir)

    if opened is not None:
        job = jobs.start_on_run(opened.dir, kind, command, device=device, stdin=stdin)
        return LLMJob(kind, job, opened)
    job = jobs.open_job(files.new_job_dir(home, kind))
    job.start(command(job.dir), device=device, kind=kind, stdin=stdin)
    return LLMJob(kind, job)


def start_judge(
    run: Run | str | os.PathLike[str],
    judge: LLM,
    *,
    against: Any = None,
    prompts: list[str] | None = None,
    n: int = 20,
    rubric: str | None = None,
    system: str | None = None,
    max_new_tokens: int = 256,
    seed: int = 42,
) -> LLMJob:
    """`judge(run, ...)` as a job on the run, queued for its device (the replies are generated
    there); returns at once. `judge` is an LLM (its key goes to the job on stdin)."""

    opened = open_run(run)
    check_judgeable(opened)
    if not isinstance(judge, LLM):
        raise TypeError("A judge job needs an LLM (judge_anthropic(), judge_openai(), ...).")
    against_ref = str(against.dir) if isinstance(against, Run) else against
    spec: dict[str, Any] = {
        "run": str(opened.dir),
        "judge": judge.describe(),
        "args": {"against": against_ref, "prompts": prompts, "n": n, "rubric": rubric,
                 "system": system, "max_new_tokens": max_new_tokens, "seed": seed},
    }  # fmt: skip
    llm_from_description(spec["judge"])  # refuse what the child could not rebuild, now
    return start(
        JUDGE_KIND,
        spec,
        run=opened,
        keys={"judge": api_key_of(judge)},
        device=queue.queue_key(opened.config),
    )


def _judge_result(job: LLMJob) -> Any:

    return read_judgement(job.run) if job.run is not None else None


def _synthesis_result(job: LLMJob) -> Any:

    return job_result(job)


# kind -> what LLMJob.result() returns once the job succeeded.
RESULTS: dict[str, Callable[[LLMJob], Any]] = {
    JUDGE_KIND: _judge_result,
    "synthesize": _synthesis_result,
    "synthesize_pairs": _synthesis_result,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dragonfarm_core.batches.jobs",
        description="Run a judge or synthesis batch (the job in JOB_DIR, from its spec.json).",
    )
    parser.add_argument("job_dir", type=Path)
    ns = parser.parse_args(argv)
    return run_child(ns.job_dir)


if __name__ == "__main__":
    sys.exit(main())
