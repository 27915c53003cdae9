"""The trainer's wait for its turn, so two trainings never fight over one device.

Runs inside the spawned trainer process before anything heavy is imported (pure Python, no
torch). A run starts when fewer than `max_concurrent()` runs of its queue key are running and no
live run of that key was queued before it (first in, first out). The queued -> running step
happens under an exclusive `flock` on `<runs_dir>/.locks/queue.lock`, so two waiters never both
take the last slot. Because the waiting happens in the run's own process, the queue survives an
app restart. POSIX only (fcntl).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from dragonfarm_core.runs import files, launch

POLL_S = 0.5
# How long the trainer waits for its launcher to record the pid (normally milliseconds).
HANDSHAKE_S = 30.0
MAX_CONCURRENT_ENV = "DRAGONFARM_MAX_CONCURRENT"


def max_concurrent() -> int:
    """How many runs of one queue key may train at once (DRAGONFARM_MAX_CONCURRENT, default 1)."""
    raw = os.environ.get(MAX_CONCURRENT_ENV, "").strip() or "1"
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(
            f"{MAX_CONCURRENT_ENV}={raw!r} is not a whole number of at least 1; "
            "set it to how many runs may train at once per device, or unset it."
        )
    return value


def queue_key(config: dict[str, Any]) -> str:
    """Which device a run will use: CPU runs queue together, accelerator runs together.

    An accelerator run's key includes CUDA_VISIBLE_DEVICES, so runs pinned to different GPUs
    of one workstation do not wait for each other.
    """
    device = (config.get("hardware") or {}).get("device", "auto")
    if device == "cpu":
        return "cpu"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return "gpu" if visible is None else f"gpu:{visible}"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _await_launcher(run_dir: Path, pid: int) -> None:
    """Wait until start_run has written our pid, so our status writes never race with it."""
    deadline = time.monotonic() + HANDSHAKE_S
    while files.read_status(run_dir).get("pid") != pid and time.monotonic() < deadline:
        time.sleep(0.02)


def _competition(run_dir: Path, key: str) -> tuple[int, int]:
    """(live runs queued before us, live runs running) with our queue key, in our runs dir."""
    mine = files.read_status(run_dir)
    my_place = (mine.get("queued_ts") or 0.0, run_dir.name)
    ahead = running = 0
    for other in sorted(run_dir.parent.iterdir()):
        if other == run_dir or other.name in files.RESERVED or not files.is_run_dir(other):
            continue
        status = files.read_status(other)
        state = status.get("state")
        # A run that has not written its key yet is just starting: assume it competes with us.
        if state not in files.ACTIVE_STATES or status.get("queue", key) != key:
            continue
        if not launch.process_alive(status):
            continue
        if state == "running":
            running += 1
        elif (status.get("queued_ts") or 0.0, other.name) < my_place:
            ahead += 1
    return ahead, running


def wait_turn(run_dir: str | os.PathLike[str]) -> bool:
    """Block until this run may train, then mark it running. False: cancelled while queued."""
    run_dir = Path(run_dir).resolve()
    me = psutil.Process()
    _await_launcher(run_dir, me.pid)
    key = queue_key(files.read_config(run_dir))
    limit = max_concurrent()
    lock = files.queue_lock_path(run_dir.parent)
    with _locked(lock):
        files.update_status(run_dir, queue=key, pid=me.pid, pid_create_time=me.create_time())
    said = None
    while True:
        with _locked(lock):
            if files.cancel_requested(run_dir):
                files.update_status(run_dir, state="cancelled", finished_at=files.now_iso())
                print(f"[dragonfarm] {files.now_iso()} cancelled while queued.", flush=True)
                return False
            ahead, running = _competition(run_dir, key)
            if running < limit and not ahead:
                now = files.now_iso()
                files.update_status(run_dir, state="running", started_at=now, heartbeat=now)
                print(f"[dragonfarm] {now} running (queue {key}).", flush=True)
                return True
        if (ahead, running) != said:
            said = (ahead, running)
            print(
                f"[dragonfarm] {files.now_iso()} waiting in queue {key}: {ahead} run(s) ahead, "
                f"{running} running (at most {limit} at once).",
                flush=True,
            )
        time.sleep(POLL_S)
