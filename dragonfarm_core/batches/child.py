"""The job's side of a judge or synthesis batch: what `python -m dragonfarm_core.batches.jobs JOB_DIR`
runs in the child.

The child reads the keys from its stdin (kept in memory only; its output is scrubbed of them),
reads the spec, rebuilds the LLMs (`llm_from_description`) and runs the handler its `kind`
names in KINDS, inside `jobs.run_job` (status, heartbeat, cancel by SIGINT). A handler is
`handler(spec, context) -> None`; `context.llm(description)` rebuilds an LLM with the key,
`context.progress(done, total, stage)` appends a row to the job's progress.jsonl (what the app
shows) and prints a log line now and then.
"""

from __future__ import annotations

import argparse
import io
import json
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dragonfarm_core.llm import LLM
from dragonfarm_core.llm.descriptions import llm_from_description
from dragonfarm_core.rundir import files, jobs, location

SPEC = "spec.json"  # in the job folder: the work's arguments, written by the launcher
# Seconds between the log lines a job prints about its progress (every row goes to the file).
LOG_EVERY_S = 5.0
JUDGE_KIND = "judge"


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
    from dragonfarm_core.judging.judgement import judge

    args = dict(spec.get("args") or {})
    result = judge(
        spec["run"],
        judge=context.llm(spec["judge"], key="judge"),
        progress=context.progress,
        **args,
    )
    print(f"[dragonfarm] judged: {result.summary.get('label')}", flush=True)


def _synthesis_job(spec: dict[str, Any], context: Context) -> None:
    from dragonfarm_core.batches.synthesis import job_work

    job_work(spec, context)


# kind -> handler(spec, context).
KINDS: dict[str, Callable[[dict[str, Any], Context], None]] = {
    JUDGE_KIND: _judge_job,
    "synthesize": _synthesis_job,
    "synthesize_pairs": _synthesis_job,
}


class Scrubbed(io.TextIOBase):
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


def read_keys() -> dict[str, str]:
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


def _scrub_output() -> dict[str, str]:
    """The keys from stdin, and this process's stdout and stderr scrubbed of them."""
    keys = read_keys()
    secrets = list(keys.values())
    sys.stdout = Scrubbed(sys.stdout, secrets)
    sys.stderr = Scrubbed(sys.stderr, secrets)
    return keys


def run_child(job_dir: Path) -> int:
    """The job in `job_dir`, to its end: its exit status (`jobs.run_job`)."""
    keys = _scrub_output()
    return jobs.run_job(job_dir, _work(job_dir.resolve(), keys))


def _ignore_interrupt(signum: int, frame: Any) -> None:
    """The job runner turns a cancel request into SIGINT; a record's job reads the request
    itself and stops where it can (between a pipeline's steps; a sweep cancels its trial's run
    with a checkpoint), so nothing under way is cut."""


def run_record_job(
    argv: list[str] | None, module: str, what: str, folder: Callable[[Path], Path],
    work: Callable[[Path, dict[str, str]], None],
) -> int:  # fmt: skip
    """`python -m <module> RECORD`, the job of a pipeline or a sweep, to its end: its exit
    status (`jobs.run_job` in the record's `folder`). `work(record path, keys)` runs with the
    keys from stdin (kept in memory, scrubbed from the output) and SIGINT ignored."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}",
                                     description=f"Run a {what} from its record.")  # fmt: skip
    parser.add_argument("record", type=Path)
    path = parser.parse_args(argv).record.resolve()
    keys = _scrub_output()

    def job() -> None:
        signal.signal(signal.SIGINT, _ignore_interrupt)
        work(path, keys)

    return jobs.run_job(folder(path), job)
