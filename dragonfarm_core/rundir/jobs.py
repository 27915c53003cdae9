"""The job runner: the one way background work is started, watched and stopped.

A job is a process and a folder. Training runs are jobs (the folder is the run directory, the
log is train.log, see `launch`); so is an evaluation recompute (a folder under the run's
jobs/, see `files.new_job_dir`), and so will be pipelines, merges and exports, judge and
synthesis batches. The folder holds status.json (the format of a run's, `status_schema`), the
process's log (stdout and stderr), and cancel.request when a stop was asked for; every read
and write goes through `files` (atomic writes, damaged-status reading).

The launcher side, in the app or a Python session:

    job = jobs.open_job(folder)
    job.start([sys.executable, "-m", "some.module", ...], device=queue_key)   # pid, at once
    job.status()           # a dead process is reported failed with its log tail (not saved)
    job.wait(timeout)      # the final status
    job.cancel(timeout)    # ask, then kill the whole process group after `timeout` s
    job.logs(20)

- `start` takes an argv list, never a shell line, so no argument is ever interpreted; the
  process runs in a session of its own (it outlives its caller, and its group is what a cancel
  kills: whatever it started goes too), with its output appended to the log and the
  allow-listed environment (`childenv.child_env`: no tokens, no API keys). Its pid and create
  time go into status.json: a pid alone can be reused after a reboot, the pair cannot. A
  process this process started is reaped the moment it ends (no zombie that looks alive).
- A job given a `device` (a queue key, `queue.queue_key`) waits its turn in the machine's
  device queue (`queue`) before it runs; one without starts at once.
- Liveness: a queued or running status whose process is gone (killed, crashed, a reboot) is
  reported failed, reason `interrupted` (`disk_full` when the disk filled up), with the log's
  tail. It is worked out on each read, never written by one: every reader agrees, and a full
  disk cannot stop a read. A queued status without a pid is given STARTUP_GRACE_S to spawn.

The job side, in the spawned process: `sys.exit(jobs.run_job(job_dir, work))` waits for the
launcher's handshake and for its device turn, marks the job running, calls `work()` with a
heartbeat in status.json, and writes how it ended: succeeded when `work` returns, failed with
the traceback's last line and the log's tail when it raises, cancelled when a cancel request
interrupted it (a cancel request sends the process SIGINT, so `work` need not look for it).
The trainer's entry point (`trainers/__main__.py`) does the same with the trainer's own rules.
Pure standard library plus psutil: the app, the trainer and the reward helper import it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from dragonfarm_core.rundir import childenv, disk, files, queue

# A job just written as queued has no pid for the few milliseconds its launcher needs to spawn
# it; a pid-less queued status younger than this is taken as starting, not as dead.
STARTUP_GRACE_S = 60.0
# After SIGTERM, how long the process group gets before SIGKILL (and, after SIGKILL, how long
# the killer waits to see it gone).
KILL_GRACE_S = 5.0
# How often a running job (run_job) writes `heartbeat` into its status, and how often it looks
# for a cancel request.
HEARTBEAT_S = 10.0
WATCH_S = 0.2
# Finished job folders of one kind kept per run (`prune`).
KEEP_JOBS = 5
# Asked before a device job is queued, with its folder and device; raises to refuse it. An app
# that caps queued jobs per user sets it (ui.queue_panel, lab profile); None: no cap.
admission: Callable[[Path, str], None] | None = None

# Processes this Python process started and that have not been seen to end; a thread per child
# reaps it as it ends (no zombies that would look alive), and tests can stop them.
_children: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class Wording:
    """How a job's failures read: what its process is called, what the job is called, and
    what to do once its process died (after it was running / before it ever started)."""

    process: str = "job"
    noun: str = "job"
    after_gone: str = "start it again"
    never_started: str = "Start it again."


JOB = Wording()


@dataclass(frozen=True)
class Job:
    """A job's folder, the log its process writes, and how its failures read. Everything is
    read from the files on each call: a Job made again later, in another session, sees the
    same job."""

    dir: Path
    log: Path
    wording: Wording = JOB
    # How the job is named in a refusal ("Run 2026...-demo"); its folder's name by default.
    name: str = ""

    @property
    def title(self) -> str:
        return self.name or f"Job {self.dir.name}"

    @property
    def state(self) -> str | None:
        return self.status().get("state")

    def logs(self, n: int = 50) -> list[str]:
        """The last `n` lines of the job's log."""
        return files.read_tail(self.log, n)

    def start(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        device: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
        stdin: bytes | None = None,
        **status_fields: Any,
    ) -> int:
        """Write a fresh queued status and spawn `argv`; returns its pid at once.

        device: the queue key of the device the job needs (it waits its turn); None for a job
        that needs none. cwd: its working directory (default: the job's folder).
        stdin: bytes written to the process's stdin, which is then closed: how a secret (an
        API key, a Hub token) reaches a job without argv, the environment, a file or a log.
        `status_fields` go into the queued status (resume notes its checkpoint there).
        """
        argv = _argv_list(argv)
        if device and admission is not None:
            admission(self.dir, device)  # raises to refuse it (a per-user cap), before any write
        current = files.read_status(self.dir)
        if current.get("state") in files.ACTIVE_STATES and process_alive(current):
            raise RuntimeError(
                f"{self.title} is already {current['state']} (pid {current.get('pid')}); "
                "wait for it or cancel it first."
            )
        files.clear_cancel(self.dir)
        queued_ts = time.time()
        queued = {"state": "queued", "queued_at": files.now_iso(), "queued_ts": queued_ts}
        if device:
            queued["queue"] = device  # the job's process reads it: it waits for this device
        files.write_status(self.dir, {**queued, **status_fields})
        command = shlex.join(argv)
        try:
            with open(self.log, "ab") as log:
                log.write(f"[dragonfarm] {files.now_iso()} queued: {command}\n".encode())
                log.flush()
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.dir if cwd is None else cwd,
                    env=childenv.child_env(),
                    start_new_session=True,
                    close_fds=True,
                )
        except OSError as e:
            files.update_status(
                self.dir,
                state="failed",
                reason="error",
                finished_at=files.now_iso(),
                error=f"Could not start the {self.wording.process} ({command}): {e}",
            )
            raise
        _adopt(proc)
        if stdin is not None and proc.stdin is not None:
            # Before the pid handshake below: the job reads its stdin before it waits for it.
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(stdin)
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
        try:
            created: float | None = psutil.Process(proc.pid).create_time()
        except psutil.NoSuchProcess:
            created = None  # it died at once; status() will report it with the log's tail
        if created is not None and device:  # its place in the queue is when it was submitted
            # An unusable queue folder: the job meets it too, and says so in its log.
            with contextlib.suppress(OSError):
                queue.register(self.dir, proc.pid, created, queued_ts, device)
        # The job's process waits for this write before it touches status.json (run_job).
        files.update_status(self.dir, pid=proc.pid, pid_create_time=created)
        return proc.pid

    def status(self) -> dict[str, Any]:
        """status.json, with a queued/running job whose process is gone reported failed.

        Reading never writes: the failure is worked out from the files on each read, the same
        for every reader (a second browser, a later session), so a full disk or a read-only
        copy reads as well as any. The next writer (a resume, a cancel) replaces the status.
        """
        status = files.read_status(self.dir)
        if not _needs_check(status):
            return status
        # Read again: the process may have written its final state just before it ended.
        status = files.read_status(self.dir)
        if status.get("state") not in files.ACTIVE_STATES or process_alive(status):
            return status
        return {**status, **self._gone(status)}

    def _gone(self, status: dict[str, Any]) -> dict[str, Any]:
        """The failed status of an active job whose process is gone: why, the log's tail, and
        when it ended (its log's last write, so every read gives the same time)."""
        pid, w, tail = status.get("pid"), self.wording, self.logs(20)
        reason, full = "interrupted", disk.full_disk(self.dir, tail)
        if pid is None:
            error = f"The {w.noun} was queued but its {w.process} process never started. "
            error += w.never_started
        elif full:
            reason = disk.DISK_FULL
            error = (
                f"The {w.process} process (pid {pid}) stopped while the {w.noun} was "
                f"{status.get('state')}: the disk was full ({full}). Free space on the disk "
                f"holding {self.dir}, then {w.after_gone}."
            )
        else:
            error = (
                f"The {w.process} process (pid {pid}) is gone but the {w.noun} was still "
                f"{status.get('state')}: it was killed or crashed (out of memory, a reboot, a "
                f"kill). See the log tail; {w.after_gone}."
            )
        return {"state": "failed", "reason": reason, "error": error, "log_tail": tail,
                "finished_at": disk.last_written(self.log, self.dir / files.STATUS)}  # fmt: skip

    def wait(self, timeout: float | None = None, poll: float = 0.2) -> dict[str, Any]:
        """Block until the job ends; its final status. TimeoutError after `timeout` seconds
        (the job keeps going)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        status = self.status()
        while status.get("state") in files.ACTIVE_STATES:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(
                    f"{self.title} is still {status.get('state')} after {timeout:g} s; it keeps "
                    "going. Wait again, or cancel it."
                )
            time.sleep(poll if left is None else max(0.0, min(poll, left)))
            status = self.status()
        return status

    def cancel(self, timeout: float = 120) -> dict[str, Any]:
        """Ask the job to stop (cancel.request); after `timeout` s, kill its process group.

        A queued job's waiting process sees the request and exits as cancelled. Returns once
        the process is gone (so the folder can be moved or deleted), with the final status.
        """
        status = self.status()
        if status.get("state") not in files.ACTIVE_STATES:
            return status
        files.request_cancel(self.dir)
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            status = files.read_status(self.dir)
            if not process_alive(status):
                break  # ended (its final state written or not), or never spawned
            if time.monotonic() >= deadline:
                with open(self.log, "a", encoding="utf-8") as log:
                    log.write(
                        f"[dragonfarm] {files.now_iso()} cancel: the {self.wording.process} did "
                        f"not stop within {timeout:g} s; killing its process group "
                        f"{status['pid']}.\n"
                    )
                kill_group(status["pid"], alive=functools.partial(process_alive, status))
                break
            time.sleep(0.1)
        status = files.read_status(self.dir)
        if status.get("state") in files.ACTIVE_STATES:
            status = files.update_status(self.dir, state="cancelled", finished_at=files.now_iso())
        return status


def open_job(
    job_dir: str | os.PathLike[str],
    log: str | os.PathLike[str] | None = None,
    wording: Wording = JOB,
    name: str = "",
) -> Job:
    """The job in `job_dir` (its log: `log`, default the folder's job.log)."""
    path = Path(job_dir).resolve()
    return Job(path, Path(log) if log is not None else files.job_log_path(path), wording, name)


def _argv_list(argv: Sequence[str | os.PathLike[str]]) -> list[str]:
    """argv as a list of strings; a single string (a command line for a shell) is refused."""
    if isinstance(argv, str | bytes) or not argv:
        raise TypeError(
            f"A job's command is a non-empty list of arguments, never a command line for a "
            f"shell; got {argv!r}. Pass e.g. [sys.executable, '-m', 'module', 'arg']."
        )
    return [os.fspath(a) for a in argv]


def _adopt(proc: subprocess.Popen[bytes]) -> None:
    """Keep our child, and reap it the moment it ends, not at the next start: until then it
    would be a zombie of this process (alive to ps), and in a long-lived app they pile up."""
    for pid in [pid for pid, child in _children.items() if child.returncode is not None]:
        del _children[pid]  # ended and reaped
    _children[proc.pid] = proc
    threading.Thread(target=proc.wait, name=f"dragonfarm-reap-{proc.pid}", daemon=True).start()


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
    return queued_at is not None and time.time() - queued_at.timestamp() < STARTUP_GRACE_S


def _needs_check(status: dict[str, Any]) -> bool:
    """Whether an active status may belong to a process that is gone."""
    return (
        status.get("state") in files.ACTIVE_STATES
        and not process_alive(status)
        and not _starting(status)
    )


def _exists(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def kill_group(
    pid: int,
    grace: float | None = None,
    *,
    alive: Callable[[], bool] | None = None,
    group_only: bool = False,
) -> None:
    """SIGTERM the process group `pid` leads, then SIGKILL it after `grace` s (KILL_GRACE_S
    by default; 0: SIGKILL at once), and wait up to KILL_GRACE_S for it to be gone.

    The one process killer of the package (a cancelled job, a reward command at its timeout).
    A job runs in a session of its own, so it leads its group and the signals reach whatever
    it started, grandchildren too; SIGKILL goes out even when the leader is gone, for what it
    left. A pid that leads no group (a trainer started by hand) gets the signals alone, unless
    `group_only` (then nothing is sent). Never this process or its group. `alive()` says
    whether the job is still there (default: the pid exists and is not a zombie).
    """
    grace = KILL_GRACE_S if grace is None else grace
    if pid <= 0 or pid == os.getpid():
        return
    try:
        group = os.getpgid(pid) == pid and pid != os.getpgid(0)
    except ProcessLookupError:
        # No process has this pid any more, so a group of that id is what the leader left.
        group = pid != os.getpgid(0)
    if not group and group_only:
        return
    send = os.killpg if group else os.kill
    alive = alive or (lambda: _exists(pid))
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, KILL_GRACE_S)):
        if sig == signal.SIGTERM and grace <= 0:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            send(pid, sig)
        end = time.monotonic() + wait
        while alive() and time.monotonic() < end:
            time.sleep(0.02)


def active_jobs(run_dir: str | os.PathLike[str], kind: str | None = None) -> list[Job]:
    """The run's jobs (of `kind`) that are queued or running (a dead one is reported failed)."""
    found = [open_job(d) for d in files.job_dirs(run_dir, kind)]
    return [job for job in found if job.state in files.ACTIVE_STATES]


def prune(run_dir: str | os.PathLike[str], kind: str, keep: int = KEEP_JOBS) -> None:
    """Remove the run's finished `kind` job folders but the newest `keep`."""
    folders = files.job_dirs(run_dir, kind)
    finished = [d for d in folders if open_job(d).state not in files.ACTIVE_STATES]
    for folder in finished[: max(0, len(finished) - keep)]:
        shutil.rmtree(folder, ignore_errors=True)


# --- the job's own process ------------------------------------------------------------------


def failure(status: dict[str, Any]) -> str:
    """How a job that did not succeed ended, for an error message: 'failed (error): ...'."""
    reason, error = status.get("reason") or "error", status.get("error") or "see the log"
    return f"failed ({reason}): {error}"


def with_log_tail(message: str, status: dict[str, Any], job: Job) -> str:
    """`message` followed by the last lines of the job's log (the status's, else read now)."""
    tail = "\n".join(status.get("log_tail") or job.logs(30))
    return f"{message}\nLast lines of the log:\n{tail}" if tail else message


def start_on_run(
    run_dir: str | os.PathLike[str],
    kind: str,
    command: Callable[[Path], list[str]],
    *,
    device: str | None,
    error: type[Exception] = RuntimeError,
    stdin: bytes | None = None,
    **status_fields: Any,
) -> Job:
    """Start a `kind` job on a run (an evaluation, a merge, ...) in <run>/jobs/<kind>-<time>/;
    returns it at once. `command(job_dir)` gives its argv. One job of a kind per run at a time
    (a second raises `error`); older finished ones are pruned. The run's own log gets a line
    naming the command, so it keeps the history of what was done to the run. `stdin`: see
    `Job.start` (a secret for the job, never written anywhere).
    """
    run_dir = Path(run_dir)
    busy = active_jobs(run_dir, kind)
    if busy:
        raise error(
            f"Run {run_dir.name} has a {kind} job in progress already ({busy[0].dir.name}, "
            f"{busy[0].state}); wait for it or cancel it."
        )
    prune(run_dir, kind, keep=KEEP_JOBS - 1)
    job = open_job(files.new_job_dir(run_dir, kind))
    argv = command(job.dir)
    with open(files.log_path(run_dir), "a", encoding="utf-8") as log:
        log.write(f"[dragonfarm] {files.now_iso()} {kind}: {shlex.join(argv)}\n")
    job.start(argv, device=device, kind=kind, stdin=stdin, **status_fields)
    return job


def run_job(
    job_dir: str | os.PathLike[str],
    work: Callable[[], object],
    log: str | os.PathLike[str] | None = None,
) -> int:
    """Run `work()` as the job in `job_dir`, in the job's process; returns the exit status.

    Waits for the launcher to record our pid, then for the device (when the job was queued
    for one), marks the job running and calls `work` with a heartbeat in status.json (`work`
    itself never writes the job's status.json). Ends succeeded when `work` returns, failed when
    it raises (traceback into the log, its last line as `error`, the log tail), cancelled when
    a cancel request interrupted it (SIGINT; a job that ignores SIGINT is killed at the
    cancel's timeout instead).
    """
    job = open_job(job_dir, log)
    queue.await_launcher(job.dir, os.getpid())
    device = files.read_status(job.dir).get("queue")
    try:
        if not (queue.wait_turn(job.dir, device) if device else _begin(job.dir)):
            return 0  # cancelled while it waited
        with _watched(job.dir):
            work()
    except SystemExit as exc:
        if exc.code not in (0, None):
            return _ended(job, exc)
    except BaseException as exc:
        return _ended(job, exc)
    finally:
        if device:
            with contextlib.suppress(OSError):
                queue.leave()  # the device is free: the next job in the queue may start
    files.update_status(job.dir, state="succeeded", finished_at=files.now_iso())
    print(f"[dragonfarm] {files.now_iso()} succeeded.", flush=True)
    return 0


def _begin(job_dir: Path) -> bool:
    """A job that needs no device starts at once (unless it was cancelled meanwhile)."""
    now = files.now_iso()
    if files.cancel_requested(job_dir):
        files.update_status(job_dir, state="cancelled", finished_at=now)
        print(f"[dragonfarm] {now} cancelled before it started.", flush=True)
        return False
    files.update_status(job_dir, state="running", started_at=now, heartbeat=now)
    print(f"[dragonfarm] {now} running.", flush=True)
    return True


@contextlib.contextmanager
def _watched(job_dir: Path) -> Iterator[None]:
    """While the body runs: a heartbeat every HEARTBEAT_S, and SIGINT on a cancel request."""
    stop = threading.Event()

    def watch() -> None:
        beat, asked = time.monotonic(), False
        while not stop.wait(WATCH_S):
            if not asked and files.cancel_requested(job_dir):
                asked = True
                os.kill(os.getpid(), signal.SIGINT)  # KeyboardInterrupt in the main thread
            if time.monotonic() - beat >= HEARTBEAT_S and not stop.is_set():
                beat = time.monotonic()
                files.update_status(job_dir, heartbeat=files.now_iso())

    watcher = threading.Thread(target=watch, name="dragonfarm-job-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()
        # The work is over: a cancel's SIGINT still on its way must not cut the final write.
        with contextlib.suppress(ValueError):  # not the main thread: it got no SIGINT either
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _ended(job: Job, exc: BaseException) -> int:
    """Write how an escape from `work` ended the job: cancelled when asked, else failed."""
    now = files.now_iso()
    if isinstance(exc, KeyboardInterrupt) and files.cancel_requested(job.dir):
        files.update_status(job.dir, state="cancelled", finished_at=now)
        print(f"[dragonfarm] {now} cancelled.", flush=True)
        return 0
    traceback.print_exception(exc)  # into the log, so its tail shows it
    sys.stderr.flush()
    error = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    files.update_status(
        job.dir,
        state="failed",
        reason="error",
        error=error[:500],
        log_tail=job.logs(50),
        finished_at=now,
    )
    return 1
