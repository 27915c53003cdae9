"""The local backend: one worker subprocess per session that keeps the last two models loaded.

The worker (`worker.py`, the only inference code that imports torch) is started on the first
call and kept, so later calls pay no interpreter start and no model load. Requests are JSON
lines over its stdin/stdout; a reader thread turns its output into a queue, so every wait has
a timeout. A worker that dies mid-request is started again and the request retried once; a
second death, or silence past the timeout, is an `InferenceError` that quotes the worker log.
`worker_stop()` ends it and frees its memory (GPU included); the next call starts it again.
The worker gets the allow-listed environment of every child process (`launch.child_env`), and
its log (in the temp folder, readable by this user only) is removed by `worker_stop()`, which
also runs at exit; logs left by sessions that were killed are removed when a worker starts.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import psutil

from dragonfarm_core.inference.protocol import (
    Cancelled,
    Completion,
    InferenceError,
    InferenceTimeout,
    Message,
    ModelSpec,
    OnToken,
    Sampling,
)
from dragonfarm_core.rundir import launch

WORKER_MODULE = "dragonfarm_core.inference.worker"
DEVICES = ("auto", "cuda", "mps", "cpu")
DTYPES = ("auto", "bfloat16", "float16", "float32")


class WorkerDied(Exception):
    """The worker process ended while a request was waiting for it."""


LOG_PREFIX = "dragonfarm-worker-"


def log_path(pid: int | None = None) -> Path:
    return Path(tempfile.gettempdir()) / f"{LOG_PREFIX}{os.getpid() if pid is None else pid}.log"


def _open_log() -> Any:
    """This session's log, for appending; created private, never through a planted symlink."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
    return os.fdopen(os.open(log_path(), flags, 0o600), "a", encoding="utf-8")


def _remove_stale_logs() -> None:
    """Remove the logs of sessions that ended without removing theirs (killed, crashed)."""
    for path in Path(tempfile.gettempdir()).glob(f"{LOG_PREFIX}*.log"):
        pid = path.stem[len(LOG_PREFIX) :]
        if pid.isdigit() and int(pid) != os.getpid() and not psutil.pid_exists(int(pid)):
            with contextlib.suppress(OSError):
                path.unlink()


def log_tail(n: int = 15) -> str:
    try:
        lines = log_path().read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(lines[-n:])


class WorkerProcess:
    """One running worker: its process, its output queue, and the settings it started with."""

    def __init__(self, device: str, dtype: str, timeout: float) -> None:
        self.settings = (device, dtype)
        module = os.environ.get("DRAGONFARM_WORKER_MODULE", WORKER_MODULE)  # tests only
        argv = [sys.executable, "-m", module, "--device", device, "--dtype", dtype]
        env = {**launch.child_env(), "TOKENIZERS_PARALLELISM": "false"}
        _remove_stale_logs()
        with _open_log() as log:
            log.write(f"--- starting {' '.join(argv)}\n")
            log.flush()
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                text=True,
                encoding="utf-8",
                start_new_session=True,
            )
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True, name="dragonfarm-worker-reader").start()
        self.ids = itertools.count(1)
        try:
            self.ready = self._next(timeout)
        except (WorkerDied, InferenceTimeout) as e:
            self.stop(grace=0)
            raise InferenceError(
                f"The local inference worker did not start ({e}). Its log "
                f"({log_path()}) ends with:\n{log_tail()}"
            ) from None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.events.put(json.loads(line))
            except json.JSONDecodeError:  # never expected: prints are sent to the log
                continue
        self.events.put(None)
        self.proc.wait()  # its output ended with it: reap it now, not at the next call

    def _next(self, timeout: float) -> dict[str, Any]:
        try:
            event = self.events.get(timeout=timeout)
        except queue.Empty:
            raise InferenceTimeout(f"no answer within {timeout:g} s") from None
        if event is None:
            raise WorkerDied(f"exit code {self.proc.wait()}")
        return event

    def request(
        self, payload: dict[str, Any], timeout: float, on_token: OnToken | None = None
    ) -> dict[str, Any]:
        """Send one request and wait for its answer; `timeout` bounds each silence."""
        rid = next(self.ids)
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"id": rid, **payload}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise WorkerDied(str(e)) from None
        while True:
            event = self._next(timeout)
            if event.get("id") != rid:
                continue
            kind = event.get("event")
            if kind == "token" and on_token is not None:
                try:
                    on_token(event["text"])
                except Cancelled:
                    self.cancel(rid, timeout)
                    raise
            elif kind == "done":
                return event
            elif kind == "error":
                raise InferenceError(f"The local worker could not answer: {event['error']}")

    def cancel(self, rid: int, timeout: float) -> None:
        """Ask the worker to drop request `rid` and wait until it has (it stops at its next
        token), so the next request finds it free."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"id": rid, "op": "cancel"}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise WorkerDied(str(e)) from None
        while (event := self._next(timeout)).get("id") != rid or event.get("event") not in (
            "done",
            "error",
        ):
            continue

    def stop(self, grace: float = 5.0) -> None:
        """Close its input (it exits by itself), then end its process group if it lingers."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=grace or 0.01)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


# One worker per session, shared by every local backend; the lock keeps one request at a time.
_worker: WorkerProcess | None = None
_lock = threading.RLock()


def _running(device: str, dtype: str, timeout: float) -> WorkerProcess:
    global _worker
    if _worker is not None and (
        _worker.proc.poll() is not None or _worker.settings != (device, dtype)
    ):
        _discard()
    if _worker is None:
        _worker = WorkerProcess(device, dtype, timeout)
    return _worker


def _discard(grace: float = 5.0) -> None:
    """Forget the worker and end it; grace=0 for one that is stuck or broken."""
    global _worker
    if _worker is not None:
        worker, _worker = _worker, None
        worker.stop(grace)


def worker_stop() -> bool:
    """Stop the local worker, free its memory and remove its log; True if one was running.

    The next generation call starts it again. Runs at exit too.
    """
    with _lock:
        was_running = _worker is not None and _worker.proc.poll() is None
        _discard()
        with contextlib.suppress(OSError):
            log_path().unlink()
        return was_running


atexit.register(worker_stop)


class LocalBackend:
    """Generates with transformers in the session's worker subprocess."""

    name = "local"
    model = None

    def __init__(
        self,
        keep_loaded: bool = True,
        device: str = "auto",
        dtype: str = "auto",
        timeout: float = 300.0,
    ) -> None:
        if device not in DEVICES:
            raise ValueError(f"device = {device!r}; use one of {', '.join(DEVICES)}.")
        if dtype not in DTYPES:
            raise ValueError(f"dtype = {dtype!r}; use one of {', '.join(DTYPES)}.")
        if not timeout or timeout <= 0:
            raise ValueError(f"timeout = {timeout!r}; use a number of seconds above 0.")
        self.keep_loaded, self.device, self.dtype = keep_loaded, device, dtype
        self.timeout = float(timeout)

    def __repr__(self) -> str:
        return (
            f"backend_local(keep_loaded={self.keep_loaded}, device={self.device!r}, "
            f"dtype={self.dtype!r})"
        )

    def chat(
        self,
        model: ModelSpec | None,
        messages: list[Message],
        sampling: Sampling,
        on_token: OnToken | None = None,
    ) -> str:
        return self._generate(model, [messages], sampling, on_token)["texts"][0]

    def generate(
        self, model: ModelSpec | None, conversations: list[list[Message]], sampling: Sampling
    ) -> list[str]:
        if not conversations:
            return []
        return self._generate(model, conversations, sampling, None)["texts"]

    def complete(
        self,
        model: ModelSpec | None,
        messages: list[Message],
        sampling: Sampling,
        on_token: OnToken | None = None,
    ) -> Completion:
        """`chat`'s reply with why it ended and its token counts. `on_token` may raise
        `Cancelled`: the worker then drops the request at its next token."""
        done = self._generate(model, [messages], sampling, on_token)
        return Completion(done["texts"][0], **done["replies"][0])

    def status(self) -> dict[str, Any]:
        """The worker's pid, device, loaded models and load count (starts it if needed)."""
        return self._call({"op": "status"}, None)["status"]

    def _generate(
        self,
        model: ModelSpec | None,
        conversations: list[list[Message]],
        sampling: Sampling,
        on_token: OnToken | None,
    ) -> dict[str, Any]:
        """The worker's answer: {"texts": [...], "replies": [{finish_reason, ...}, ...]}."""
        if model is None:
            raise ValueError(
                "The local backend needs a model: pass a run, a run directory, a "
                "model id or a model folder."
            )
        payload = {
            "op": "generate",
            "model": model.as_dict(),
            "conversations": conversations,
            "sampling": sampling.as_dict(),
            "stream": on_token is not None,
        }
        return self._call(payload, on_token)

    def _call(self, payload: dict[str, Any], on_token: OnToken | None) -> dict[str, Any]:
        with _lock:
            try:
                return self._attempt(payload, on_token)
            finally:
                if not self.keep_loaded:
                    _discard()

    def _attempt(self, payload: dict[str, Any], on_token: OnToken | None) -> dict[str, Any]:
        """Ask the worker, starting it if needed; a death mid-request gets one more try (a
        streamed reply then starts over: `on_token` sees the new reply's pieces too)."""
        for attempt in (1, 2):
            worker = _running(self.device, self.dtype, self.timeout)
            try:
                return worker.request(payload, self.timeout, on_token)
            except WorkerDied as e:
                _discard(grace=0)
                if attempt == 2:
                    raise InferenceError(
                        f"The local inference worker died twice while answering ({e}); it is "
                        f"stopped and the next call starts it again. Its log ({log_path()}) "
                        f"ends with:\n{log_tail()}"
                    ) from None
            except KeyboardInterrupt:
                _discard(grace=0)  # else it would finish the abandoned request first
                raise
            except InferenceTimeout:
                _discard(grace=0)
                raise InferenceTimeout(
                    f"The local inference worker was silent for {self.timeout:g} s, so it was "
                    "stopped (the next call starts it again). Raise the timeout with "
                    "backend_local(timeout=...) for slow models, or lower max_new_tokens."
                ) from None
        raise AssertionError("unreachable")


def backend_local(
    keep_loaded: bool = True, device: str = "auto", dtype: str = "auto", timeout: float = 300.0
) -> LocalBackend:
    """A worker on this machine that keeps the last two models loaded.

    keep_loaded=False stops it after every call. `timeout` is how long the worker may stay
    silent (loading a model, generating a batch) before the request is abandoned.
    """
    return LocalBackend(keep_loaded=keep_loaded, device=device, dtype=dtype, timeout=timeout)
