"""Judge and synthesis batches as jobs: what the app starts, so its process never waits on them.

    job = llm_jobs.start_judge(run, judge_llm, against="base", n=20)   # returns at once
    job.state; job.progress(); job.logs(20); job.cancel(); job.wait()
    result = job.result()                                                # the Judgement

The launcher writes the job's spec.json (the work's arguments; every LLM as its `describe()`,
which never holds a key) into the job folder and starts `python -m dragonfarm_core.llm_jobs
JOB_DIR` through the one job runner (`rundir.jobs`). A key (typed in the app, or read from the
app's environment, which the allow-listed child environment does not pass) is handed to the
child on its stdin, as JSON, and kept in its memory only: never in argv, the environment, a
file or a log (the child's output is scrubbed of it too).

The child reads the spec, rebuilds the LLMs (`llm_from_description`) and runs the handler its
`kind` names in KINDS, inside `jobs.run_job` (status, heartbeat, cancel by SIGINT). A handler
is `handler(spec, context) -> None`; `context.llm(description)` rebuilds an LLM with the key,
`context.progress(done, total, stage)` appends a row to the job's progress.jsonl (what the app
shows) and prints a log line now and then.

A job works on a run (<run>/jobs/<kind>-<time>/, `jobs.start_on_run`), or, for work that has
no run (a synthesis from a dataset), in <runs_dir>/jobs/<kind>-<time>/ (`start`).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dragonfarm_core.llm import (
    LLM,
    judge_anthropic,
    judge_local,
    judge_openai,
    llm_anthropic,
    llm_local,
    llm_openai,
)
from dragonfarm_core.rundir import files, jobs, location, queue
from dragonfarm_core.rundir.run import Run, open_run

SPEC = "spec.json"
# Seconds between the log lines a job prints about its progress (every row goes to the file).
LOG_EVERY_S = 5.0
CANCEL_TIMEOUT_S = 10.0
JUDGE_KIND = "judge"


# -- rebuilding an LLM from its description -------------------------------------------------------


def llm_from_description(description: dict[str, Any], api_key: str | None = None) -> LLM:
    """The LLM an `LLM.describe()` record describes, with `api_key` (kept in memory only).

    Anthropic, OpenAI-compatible and local models can be rebuilt; a chatlas chat or a plain
    Python function cannot (nothing in a record says how to make them again)."""
    if not isinstance(description, dict):
        raise TypeError("An LLM description is a dict, as LLM.describe() returns it.")
    provider = description.get("provider")
    judge = bool(description.get("judge"))
    sampling = description.get("sampling") or {}
    system = description.get("system")
    model = description.get("model")
    common: dict[str, Any] = {"system": system, "cache": bool(description.get("cache", True))}
    if provider in ("anthropic", "openai"):
        common.update(
            max_tokens=int(sampling.get("max_tokens") or 1024),
            temperature=sampling.get("temperature"),
            max_active=int(description.get("max_active") or 4),
            timeout=float(description.get("timeout") or 120.0),
            api_key=api_key,
        )
    if provider == "anthropic":
        if judge:
            return judge_anthropic(model=str(model), base_url=description.get("url"), **common)
        return llm_anthropic(model=str(model), base_url=description.get("url"), **common)
    if provider == "openai":
        url = str(description.get("url") or "")
        key_env = description.get("api_key_env")
        if judge:
            return judge_openai(str(model), url, api_key_env=key_env, **common)
        return llm_openai(str(model), url, api_key_env=key_env, **common)
    if provider == "local":
        make_local = judge_local if judge else llm_local
        return make_local(
            str(model),
            system,
            max_new_tokens=int(sampling.get("max_new_tokens") or 256),
            temperature=float(sampling.get("temperature", 0.0 if judge else 0.7)),
            top_p=float(sampling.get("top_p", 0.9)),
            cache=bool(description.get("cache", False)),
        )
    raise ValueError(
        f"A {provider or 'plain function'} judge or teacher cannot run as a background job: "
        "use an Anthropic, OpenAI-compatible or local model there, or call the function in "
        "Python."
    )


def api_key_of(llm: Any) -> str | None:
    """The key an API LLM would send (typed in, or read from its environment variable): the
    one thing the child needs that its description leaves out."""
    key = getattr(llm, "_api_key", None)  # _ApiLLM: the given key, else the named variable's
    return key if isinstance(key, str) and key else None


# -- the launcher side ----------------------------------------------------------------------------


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
    return [sys.executable, "-m", "dragonfarm_core.llm_jobs", str(job_dir)]


def _secrets(keys: dict[str, str | None]) -> bytes:
    return json.dumps({k: v for k, v in keys.items() if v}).encode()


def _home(run_dir: Path) -> Path:
    """The runs dir a run belongs to (an archived run's is two levels up)."""
    parent = run_dir.parent
    return parent.parent if parent.name == files.ARCHIVED_DIR else parent


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
    home = _home(opened.dir) if opened is not None else location.runs_dir(runs_dir)
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
    from dragonfarm_core.judgement import check_judgeable

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


# -- the job's side ------------------------------------------------------------------------------


class Context:
    """What a handler gets besides its spec: its job folder, the keys, progress reporting."""

    def __init__(self, job_dir: Path, keys: dict[str, str]) -> None:
        self.job_dir = job_dir
        self._keys = keys
        self._logged = 0.0

    def key(self, name: str) -> str | None:
        return self._keys.get(name)

    def llm(self, description: dict[str, Any], key: str | None = None) -> LLM:
        """The LLM `description` names, with the key called `key` (the record written by
        the work stays the launcher's description: it names a key's variable, never its
        value)."""
        llm = llm_from_description(description, self.key(key) if key else None)
        recorded = dict(description)
        llm.describe = lambda: dict(recorded)  # type: ignore[method-assign]
        return llm

    def progress(self, done: int, total: int, stage: str) -> None:
        files.append_progress(
            self.job_dir, {"done": done, "total": total, "stage": stage, "at": files.now_iso()}
        )
        now = time.monotonic()
        if now - self._logged >= LOG_EVERY_S or done >= total:
            self._logged = now
            print(f"[dragonfarm] {stage} {done}/{total}", flush=True)


def _judge_job(spec: dict[str, Any], context: Context) -> None:
    from dragonfarm_core.judgement import judge

    args = dict(spec.get("args") or {})
    result = judge(
        spec["run"],
        judge=context.llm(spec["judge"], key="judge"),
        progress=context.progress,
        **args,
    )
    print(f"[dragonfarm] judged: {result.summary.get('label')}", flush=True)


def _judge_result(job: LLMJob) -> Any:
    from dragonfarm_core.judgement import read_judgement

    return read_judgement(job.run) if job.run is not None else None


def _synthesis_job(spec: dict[str, Any], context: Context) -> None:
    from dragonfarm_core.synthesis import job_work

    job_work(spec, context)


def _synthesis_result(job: LLMJob) -> Any:
    from dragonfarm_core.synthesis import job_result

    return job_result(job)


# kind -> handler(spec, context). Synthesis adds its kinds here.
KINDS: dict[str, Callable[[dict[str, Any], Context], None]] = {
    JUDGE_KIND: _judge_job,
    "synthesize": _synthesis_job,
    "synthesize_pairs": _synthesis_job,
}
# kind -> what LLMJob.result() returns once the job succeeded.
RESULTS: dict[str, Callable[[LLMJob], Any]] = {
    JUDGE_KIND: _judge_result,
    "synthesize": _synthesis_result,
    "synthesize_pairs": _synthesis_result,
}


class _Scrubbed(io.TextIOBase):
    """A text stream that writes what it is given with every secret replaced by ***."""

    def __init__(self, stream: Any, secrets: list[str]) -> None:
        self._stream, self._secrets = stream, [s for s in secrets if s]

    def write(self, text: str) -> int:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return self._stream.write(text)

    def flush(self) -> None:
        self._stream.flush()

    # What libraries ask of sys.stdout / sys.stderr besides write: the real stream's answers.
    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return int(self._stream.fileno())

    def isatty(self) -> bool:
        return bool(self._stream.isatty())

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self._stream, "encoding", "utf-8"))


def _read_keys() -> dict[str, str]:
    """The secrets the launcher wrote on stdin (nothing when stdin is empty or not a pipe)."""
    try:
        raw = sys.stdin.buffer.read() if sys.stdin is not None else b""
    except (OSError, ValueError):
        return {}
    if not raw.strip():
        return {}
    value = json.loads(raw)
    return {str(k): str(v) for k, v in value.items() if v} if isinstance(value, dict) else {}


def _work(job_dir: Path, keys: dict[str, str]) -> Callable[[], None]:
    def work() -> None:
        spec = files.read_json(job_dir / SPEC)
        if not isinstance(spec, dict) or spec.get("kind") not in KINDS:
            raise ValueError(f"{job_dir / SPEC} names no known job kind ({', '.join(KINDS)}).")
        if spec.get("runs_dir"):
            location.set_runs_dir(spec["runs_dir"])
        try:
            KINDS[spec["kind"]](spec, Context(job_dir, keys))
        except Exception as e:
            # The failure is written to status.json and the log: never with a key in it.
            message = str(e)
            for secret in keys.values():
                message = message.replace(secret, "***")
            if message != str(e):
                raise RuntimeError(message) from None
            raise

    return work


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dragonfarm_core.llm_jobs",
        description="Run a judge or synthesis batch (the job in JOB_DIR, from its spec.json).",
    )
    parser.add_argument("job_dir", type=Path)
    ns = parser.parse_args(argv)
    keys = _read_keys()
    secrets = list(keys.values())
    sys.stdout = _Scrubbed(sys.stdout, secrets)
    sys.stderr = _Scrubbed(sys.stderr, secrets)
    return jobs.run_job(ns.job_dir, _work(ns.job_dir.resolve(), keys))


if __name__ == "__main__":
    sys.exit(main())
