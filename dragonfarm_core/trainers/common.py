"""Pieces every trainer shares: the status writer, cancel, failure reports, step counters.

A trainer talks to the rest of dragonfarm only through the run directory. `RunReporter` owns the
trainer's side of it: status.json (with a heartbeat thread, so a reader can tell a slow step from
a dead process), progress.jsonl, and the final state. `reported_run` wraps a trainer's body so a
crash always ends as `failed` with a reason and the log's tail, never as a run stuck in
`running`.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dragonfarm_core.methods import PROGRESS_COLUMNS
from dragonfarm_core.rundir import disk, files
from dragonfarm_core.settings import SettingsError
from dragonfarm_core.trainers.placement import process_rank

HEARTBEAT_S = 2.0
LOG_TAIL_LINES = 50


class DataError(RuntimeError):
    """The training files are missing or malformed; the message names the file and row."""


class ModelLoadError(RuntimeError):
    """The model, tokenizer or an adapter to fold in could not be loaded."""


class NonFiniteLoss(RuntimeError):
    """The training loss became NaN or infinite: the run stops there rather than train on."""


def failure_reason(exc: BaseException) -> str:
    """Classify an exception into status.json's `reason`."""
    text = str(exc).lower()
    if (
        isinstance(exc, torch.OutOfMemoryError | MemoryError)
        or "out of memory" in text
        or ("can't allocate memory" in text)
    ):
        return "out_of_memory"
    if isinstance(exc, NonFiniteLoss):
        return "nan_loss"
    if isinstance(exc, ModuleNotFoundError):
        return "missing_dependency"
    if isinstance(exc, DataError):
        return "data_error"
    if isinstance(exc, ModelLoadError):
        return "model_error"
    if isinstance(exc, SettingsError):
        return "config_error"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    if disk.is_disk_full(exc):
        return disk.DISK_FULL
    return "error"


def peak_memory_mib() -> float:
    """This process's peak memory so far, in MiB: what the GPU's caching allocator reserved
    when CUDA was used, else the peak resident set (what the preflight estimate is checked
    against, bench/preflight.py)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return round(torch.cuda.max_memory_reserved() / 2**20, 1)
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)


class RunReporter:
    """The trainer's writer of status.json and progress.jsonl, with a heartbeat thread.

    Every status write goes through one lock: the heartbeat thread and the training loop both
    rewrite status.json, and a read-modify-write from each at once would lose a field. Every
    field this reporter wrote goes into each write again, so a status.json that was damaged
    (and is then replaced by the write, see files.update_status) comes back whole.

    In a run of several processes only rank 0's reporter writes (`writes`); the others still
    see a cancel request. The status keeps the launcher's pid there: that process (`python -m
    dragonfarm_core.trainers`, holding the queue's ticket) is the run's, the ranks its children.
    """

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        self.writes = process_rank() == 0
        self._written: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._signalled = False

    def update(self, **fields: Any) -> None:
        if not self.writes:
            return
        with self._lock:
            self._written.update(fields)
            files.update_status(self.run_dir, **self._written, heartbeat=files.now_iso())

    def start(self) -> None:
        """Mark the run running, clear an earlier failure, and start the heartbeat."""
        mine = {} if "RANK" in os.environ else {"pid": os.getpid()}
        self.update(
            state="running",
            **mine,
            started_at=files.now_iso(),
            finished_at=None,
            reason=None,
            error=None,
            log_tail=None,
        )
        if self.writes:
            self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
            self._thread.start()
        with contextlib.suppress(ValueError):  # signal handlers only install on the main thread
            signal.signal(signal.SIGTERM, self._on_sigterm)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            self.update()

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        # A polite kill means what cancel.request means: stop after this step, keep the work.
        self._signalled = True

    def cancel_requested(self) -> bool:
        return self._signalled or files.cancel_requested(self.run_dir)

    def progress(self, **values: Any) -> None:
        """Append a progress row; every column is present, missing values are null."""
        if self.writes:
            files.append_progress(self.run_dir, dict.fromkeys(PROGRESS_COLUMNS) | values)

    def finish(self, state: str, **fields: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.update(state=state, finished_at=files.now_iso(), phase=None,
                    peak_memory_mib=peak_memory_mib(), **fields)  # fmt: skip
        if state == "cancelled" and self.writes:
            files.clear_cancel(self.run_dir)

    def fail(self, exc: BaseException) -> None:
        """Record the failure: reason, one-line error, and the log tail with the traceback."""
        if not self.writes:
            self.finish("failed")  # stops the heartbeat; rank 0 (or the launcher) records it
            return
        trace = traceback.format_exception(exc)
        lines = files.read_log_tail(self.run_dir, LOG_TAIL_LINES)
        # The traceback reaches train.log only when the process exits, so add it here.
        lines += "".join(trace).rstrip("\n").splitlines()
        error = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
        self.finish(
            "failed",
            reason=failure_reason(exc),
            error=error[:500],
            log_tail=lines[-LOG_TAIL_LINES:],
        )


@contextlib.contextmanager
def reported_run(run_dir: str | os.PathLike[str]) -> Iterator[RunReporter]:
    """Run a trainer body: state running on entry; on any exception, failed with reason and tail.

    The exception is re-raised after status.json is written, so the process exits non-zero and
    the traceback lands in train.log.
    """
    reporter = RunReporter(run_dir)
    reporter.start()
    try:
        yield reporter
    except BaseException as exc:
        reporter.fail(exc)
        raise


@dataclass
class TrainState:
    """The loop's counters; saved in every checkpoint, so a resumed run continues them."""

    step: int = 0
    elapsed_s: float = 0.0
    loss_sum: float = 0.0
    loss_steps: int = 0
    log_sum: float = 0.0
    log_steps: int = 0
    tokens: int = 0
    slots: int = 0
    eval_s: float = 0.0  # of elapsed_s, the time the held-out measurements took

    def record(self, loss: float, tokens: int, slots: int) -> None:
        """Count one optimizer step: its loss, its real tokens and its padded token slots.
        A loss that is NaN or infinite stops the run (NonFiniteLoss) before it is counted."""
        if not math.isfinite(loss):
            raise NonFiniteLoss(
                f"The training loss became {loss} at step {self.step}; the run stopped there "
                "rather than train on. A lower learning rate usually fixes it (or float32 "
                "weights, when they were bfloat16 or float16)."
            )
        self.loss_sum += loss
        self.loss_steps += 1
        self.log_sum += loss
        self.log_steps += 1
        self.tokens += tokens
        self.slots += slots

    def take_log_loss(self) -> float | None:
        """Mean loss of the steps since the last progress row, and start a new window."""
        loss = self.log_sum / self.log_steps if self.log_steps else None
        self.log_sum, self.log_steps = 0.0, 0
        return loss

    def metrics(self, train_seconds: float) -> dict[str, Any]:
        """The run's training figures; `train_seconds` is its wall time, held-out measurements
        included. Tokens per second count the training steps' time only."""
        stepping = train_seconds - self.eval_s
        return {
            "train_loss": self.loss_sum / self.loss_steps if self.loss_steps else None,
            "train_runtime_s": round(train_seconds, 2),
            "eval_runtime_s": round(self.eval_s, 2),
            "train_tokens": self.tokens,
            "train_tokens_per_s": self.tokens / stepping if stepping > 0 else None,
            "train_padding": 1 - self.tokens / self.slots if self.slots else None,
        }


class Stopwatch:
    """Elapsed seconds that continue across a resume, and a steps-based ETA."""

    def __init__(self, elapsed_before: float, first_step: int) -> None:
        self._t0 = time.monotonic()
        self._before = elapsed_before
        self._first_step = first_step

    def elapsed(self) -> float:
        return self._before + time.monotonic() - self._t0

    def eta(self, step: int, total_steps: int) -> float | None:
        done = step - self._first_step
        if done <= 0:
            return None
        return (time.monotonic() - self._t0) / done * (total_steps - step)
