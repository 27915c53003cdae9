"""Start a run's trainer subprocess, tell whether it is still alive, and cancel it.

`start_run` spawns `python -m dragonfarm_core.trainers RUN_DIR` with an argv list (no shell), in
its own session (so it outlives the caller and can be stopped as a group), with its output going
to the run's log. The pid and the process's create time go into status.json: a pid alone can be
reused by an unrelated process after a reboot, the pair cannot. A run whose status says queued or
running but whose process is gone is reported failed (`interrupted`) with the log's tail.
Pure standard library plus psutil: the app imports this.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from dragonfarm_core.runs import files

# A run just written as queued has no pid for the few milliseconds its launcher needs to spawn
# it; a pid-less queued status younger than this is taken as starting, not as dead.
STARTUP_GRACE_S = 60.0
# After SIGTERM, how long the process group gets before SIGKILL.
KILL_GRACE_S = 5.0

# Trainer processes this Python process started, so their exit is reaped (no zombies that
# would look alive) and tests can stop them.
_children: dict[int, subprocess.Popen[bytes]] = {}


def trainer_command(run_dir: str | os.PathLike[str]) -> list[str]:
    return [sys.executable, "-m", "dragonfarm_core.trainers", str(run_dir)]


def child_env() -> dict[str, str]:
    """The caller's environment (HF_TOKEN and the like included), with this package importable."""
    env = dict(os.environ)
    package_parent = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"  # log lines reach train.log as they are printed
    return env


def start_run(run_dir: str | os.PathLike[str], **status_fields: Any) -> int:
    """Queue the run and spawn its trainer process; returns the pid. Returns at once.

    `status_fields` go into the fresh queued status (resume notes its checkpoint there).
    """
    run_dir = Path(run_dir).resolve()
    config = files.read_config(run_dir)
    current = files.read_status(run_dir)
    if current.get("state") in files.ACTIVE_STATES and process_alive(current):
        raise RuntimeError(
            f"Run {config.get('id', run_dir.name)} is already {current['state']} (pid "
            f"{current.get('pid')}); wait for it or cancel it first."
        )
    files.clear_cancel(run_dir)
    queued = {"state": "queued", "queued_at": files.now_iso(), "queued_ts": time.time()}
    files.write_status(run_dir, {**queued, **status_fields})
    argv = trainer_command(run_dir)
    try:
        with open(files.log_path(run_dir), "ab") as log:
            log.write(f"[dragonfarm] {files.now_iso()} queued: {' '.join(argv)}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=run_dir,
                env=child_env(),
                start_new_session=True,
                close_fds=True,
            )
    except OSError as e:
        files.update_status(
            run_dir,
            state="failed",
            reason="error",
            finished_at=files.now_iso(),
            error=f"Could not start the trainer ({' '.join(argv)}): {e}",
        )
        raise
    for child in _children.values():
        child.poll()  # reap trainers that ended, so no zombies pile up in a long-lived app
    _children[proc.pid] = proc
    try:
        created: float | None = psutil.Process(proc.pid).create_time()
    except psutil.NoSuchProcess:
        created = None  # it died at once; live_status will report it with the log's tail
    # The trainer waits for this write before it touches status.json (see queue.wait_turn).
    files.update_status(run_dir, pid=proc.pid, pid_create_time=created)
    return proc.pid


def process_alive(status: dict[str, Any]) -> bool:
    """True when the status's pid is alive and is the same process (same create time)."""
    pid = status.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    child = _children.get(pid)
    if child is not None and child.poll() is not None:  # poll() also reaps our own child
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        created = status.get("pid_create_time")
        return created is None or abs(proc.create_time() - float(created)) < 1.0
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # it exists; we just may not inspect it


def _starting(status: dict[str, Any]) -> bool:
    if status.get("state") != "queued" or status.get("pid") is not None:
        return False
    queued_at = files.parse_iso(status.get("queued_at"))
    if queued_at is None:
        return False
    age = time.time() - queued_at.timestamp()
    return age < STARTUP_GRACE_S


def live_status(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """status.json, with a queued/running run whose process is gone turned into failed.

    The failure is written back, so every reader (a second browser, a later session) agrees.
    """
    status = files.read_status(run_dir)
    if status.get("state") not in files.ACTIVE_STATES or process_alive(status) or _starting(status):
        return status
    # Read again: the process may have written its final state just before it ended.
    status = files.read_status(run_dir)
    if status.get("state") not in files.ACTIVE_STATES or process_alive(status):
        return status
    pid = status.get("pid")
    if pid is None:
        error = (
            "The run was queued but its trainer process never started. Start it again "
            "with dragon.resume(run)."
        )
    else:
        error = (
            f"The trainer process (pid {pid}) is gone but the run was still "
            f"{status.get('state')}: it was killed or crashed (out of memory, a reboot, a "
            "kill). See the log tail; resume it with dragon.resume(run)."
        )
    return files.update_status(
        run_dir,
        state="failed",
        reason="interrupted",
        error=error,
        log_tail=files.read_log_tail(run_dir, 20),
        finished_at=files.now_iso(),
    )


def cancel_run(run_dir: str | os.PathLike[str], timeout: float = 120) -> dict[str, Any]:
    """Ask the trainer to stop after its current step; after `timeout` s, kill its group.

    A queued run's waiting process sees the request and exits as cancelled. Returns once the
    process is gone (so the run's folder can be moved or deleted), with the final status.
    """
    status = live_status(run_dir)
    if status.get("state") not in files.ACTIVE_STATES:
        return status
    files.request_cancel(run_dir)
    deadline = time.monotonic() + max(0.0, timeout)
    while True:
        status = files.read_status(run_dir)
        if not process_alive(status):
            break  # ended (its final state written or not), or never spawned
        if time.monotonic() >= deadline:
            _kill_group(run_dir, status, timeout)
            break
        time.sleep(0.1)
    status = files.read_status(run_dir)
    if status.get("state") in files.ACTIVE_STATES:
        status = files.update_status(run_dir, state="cancelled", finished_at=files.now_iso())
    return status


def _kill_group(run_dir: str | os.PathLike[str], status: dict[str, Any], timeout: float) -> None:
    """SIGTERM the trainer's process group, then SIGKILL what is left after a grace period."""
    pid = status["pid"]
    try:
        # start_new_session made the trainer its group's leader; anything else (a status that
        # names some other process) gets a signal to that process alone, and never to us.
        group = os.getpgid(pid) == pid and pid != os.getpgid(0)
    except ProcessLookupError:
        return
    if pid == os.getpid():
        return
    with open(files.log_path(run_dir), "a", encoding="utf-8") as log:
        log.write(
            f"[dragonfarm] {files.now_iso()} cancel: the trainer did not stop within "
            f"{timeout:g} s; killing its process group {pid}.\n"
        )
    send = os.killpg if group else os.kill
    for sig in (signal.SIGTERM, signal.SIGKILL):
        # SIGKILL goes out even when the leader is gone: workers it started may be left.
        with contextlib.suppress(ProcessLookupError):
            send(pid, sig)
        end = time.monotonic() + KILL_GRACE_S
        while process_alive(status) and time.monotonic() < end:
            time.sleep(0.05)
