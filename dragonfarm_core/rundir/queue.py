"""The device queue: a job that needs a device waits for its turn, so two trainings (or a
training and an evaluation) never share one device of this machine.

A job's queue key is the device it will use, resolved as the trainer resolves it but without
importing torch: "cpu", "mps", or "cuda:<gpu>", where <gpu> is the GPU as the machine numbers it
(the entry of CUDA_VISIBLE_DEVICES when that is set); a run on several GPUs
(`Hardware(devices=...)`) has them all, comma-separated, and waits while any is taken. So device="auto" on a CPU-only machine
queues with device="cpu", and runs pinned to different GPUs do not wait for each other. Only
jobs started with a device (`jobs.start(..., device=key)`) queue: a training run, an
evaluation recompute; a job that needs no device starts at once.

The queue is one per user and machine, whatever runs dir or Python session a job comes from:
`queue_dir()` holds a ticket per live job process, {host, pid, create_time, run_dir (the job's
folder), key, queued_ts, state}. `jobs.start` writes it as it spawns the process, so the order
is the order of submission even before the job's interpreter is up. The job (pure Python,
nothing heavy imported yet) starts when fewer than `max_concurrent()` live tickets of its key
are running and no live queued ticket of its key was submitted before its own (first in, first
out). Tickets are read and written under an exclusive `flock` on `<queue_dir>/queue.lock`, so
two waiters never both take the last slot; a ticket whose process is gone (killed, crashed, a
reboot) is removed by the next reader. Because the waiting happens in the job's own process,
the queue survives an app restart. POSIX only (fcntl).
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import importlib.util
import os
import platform
import re
import socket
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psutil

from dragonfarm_core.rundir import files

POLL_S = 0.5
# How long a job waits for its launcher to record the pid (normally milliseconds).
HANDSHAKE_S = 30.0
MAX_CONCURRENT_ENV = "DRAGONFARM_MAX_CONCURRENT"
QUEUE_DIR_ENV = "DRAGONFARM_QUEUE_DIR"
LOCK_NAME = "queue.lock"
TICKETS = "tickets"
# A ticket that cannot be read this long after its last write was torn by a kill: removed.
TORN_TICKET_S = 30.0


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


def queue_dir(environ: Mapping[str, str] | None = None) -> Path:
    """This user's machine-wide queue folder: DRAGONFARM_QUEUE_DIR, else the user's cache folder
    ($XDG_CACHE_HOME or ~/.cache) /dragonfarm/queue."""
    environ = os.environ if environ is None else environ
    if environ.get(QUEUE_DIR_ENV):
        return Path(environ[QUEUE_DIR_ENV]).expanduser()
    cache = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "dragonfarm" / "queue"


def _visible(environ: Mapping[str, str], name: str) -> list[str] | None:
    """The GPUs a *_VISIBLE_DEVICES variable lets through, as CUDA reads it (up to the first
    invalid entry); None when it is not set."""
    raw = environ.get(name)
    if raw is None:
        return None
    found = []
    for entry in (e.strip() for e in raw.split(",")):
        if not entry or entry.startswith("-"):
            break
        found.append(entry)
    return found


def _torch_build() -> dict[str, Any]:
    """torch's `version.cuda` and `version.hip`, read from its version.py without importing it
    (an import costs seconds and the queue runs before anything heavy)."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return {}
    if spec is None or not spec.origin:
        return {}
    try:
        text = (Path(spec.origin).parent / "version.py").read_text(encoding="utf-8")
    except OSError:
        return {}
    found: dict[str, Any] = {}
    for name, value in re.findall(r"^(cuda|hip)\s*(?::[^=\n]*)?=\s*(.+)$", text, re.M):
        with contextlib.suppress(ValueError, SyntaxError):
            found[name] = ast.literal_eval(value.strip())
    return found


def _gpus_present(build: dict[str, Any]) -> bool:
    """Whether this torch build has a GPU to use: NVIDIA device nodes for a CUDA build, the
    ROCm kernel driver for a ROCm one."""
    if build.get("cuda"):
        gpus = Path("/proc/driver/nvidia/gpus")
        return any(Path("/dev").glob("nvidia[0-9]*")) or (gpus.is_dir() and any(gpus.iterdir()))
    if build.get("hip"):
        return Path("/dev/kfd").exists()
    return False


def resolve_device(device: str = "auto", environ: Mapping[str, str] | None = None) -> str:
    """The device a run with Hardware(device=...) trains on: "cpu", "mps" or "cuda:<gpu>".

    auto picks CUDA (NVIDIA or ROCm), then Apple MPS, then the CPU, as the trainer does, from
    what can be seen without importing torch: how torch was built, the GPU device nodes and
    CUDA_VISIBLE_DEVICES (HIP_ / ROCR_VISIBLE_DEVICES on ROCm).

    >>> resolve_device("cpu"), resolve_device("cuda", {"CUDA_VISIBLE_DEVICES": "2,3"})
    ('cpu', 'cuda:2')
    """
    environ = os.environ if environ is None else environ
    if device in ("cpu", "mps"):
        return device
    build = _torch_build()
    visible = _visible(environ, "CUDA_VISIBLE_DEVICES")
    if visible is None and build.get("hip"):
        visible = _visible(environ, "HIP_VISIBLE_DEVICES")
        visible = _visible(environ, "ROCR_VISIBLE_DEVICES") if visible is None else visible
    if device == "auto":
        if visible == [] or not _gpus_present(build):
            if sys.platform == "darwin" and platform.machine() == "arm64":
                return "mps"
            return "cpu"
        device = "cuda"
    _, _, index_text = device.partition(":")
    index = int(index_text) if index_text.isdigit() else 0
    if visible is not None and index < len(visible):
        return f"cuda:{visible[index]}"
    return f"cuda:{index}"


def devices(environ: Mapping[str, str] | None = None) -> list[str]:
    """The devices a run can be given here, each its own queue: "cpu", "mps" on Apple
    silicon, and "cuda:0", "cuda:1", ... for each GPU this torch build can use (counted from
    CUDA_VISIBLE_DEVICES when set, else from the NVIDIA driver's GPU list), without torch."""
    environ = os.environ if environ is None else environ
    found = ["cpu"]
    if sys.platform == "darwin" and platform.machine() == "arm64":
        found.append("mps")
    build = _torch_build()
    if not _gpus_present(build):
        return found
    visible = _visible(environ, "CUDA_VISIBLE_DEVICES")
    if visible is None:
        gpus = Path("/proc/driver/nvidia/gpus")
        listed = list(gpus.iterdir()) if gpus.is_dir() else []
        nodes = [p for p in Path("/dev").glob("nvidia*") if p.name[6:].isdigit()]
        visible = [str(i) for i in range(len(listed) or len(nodes) or 1)]
    return found + [f"cuda:{i}" for i in range(len(visible))]


def run_devices(hardware: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> list[str]:
    """Every device a run with these Hardware settings (config.json's "hardware") trains on,
    resolved as `resolve_device` does: one for a run on one device; each GPU of a run with
    `devices` (a count: the first that many of `device`'s GPUs); "cpu" once for several CPU
    processes, which share the CPU as one queue.

    >>> run_devices({"device": "cuda", "devices": "cuda:1,3"}, {"CUDA_VISIBLE_DEVICES": "4,5,6,7"})
    ['cuda:5', 'cuda:7']
    >>> run_devices({"device": "cpu", "devices": 2})
    ['cpu']
    """
    device, devices = hardware.get("device") or "auto", hardware.get("devices")
    first = resolve_device(device, environ)
    if devices is None or not first.startswith("cuda"):
        return [first]
    if isinstance(devices, int):
        ids: list[str] = [str(i) for i in range(devices)]
    else:
        ids = str(devices).removeprefix("cuda:").split(",")
    return [resolve_device(f"cuda:{i}", environ) for i in ids]


def queue_key(config: dict[str, Any]) -> str:
    """The run's queue: the devices it will train on (`run_devices`), comma-separated; a run
    waits while any of them is taken."""
    return ",".join(run_devices(config.get("hardware") or {}))


def _overlap(one: Any, other: Any) -> bool:
    return bool(set(str(one).split(",")) & set(str(other).split(",")))


@contextlib.contextmanager
def _locked() -> Iterator[Path]:
    """Hold this machine's queue lock; yields the tickets folder."""
    root = queue_dir()
    tickets = root / TICKETS
    try:
        tickets.mkdir(parents=True, exist_ok=True, mode=0o700)
        handle = open(root / LOCK_NAME, "a")  # noqa: SIM115 (closed below)
    except OSError as e:
        raise OSError(
            f"The training queue folder {root} cannot be used ({e}); set {QUEUE_DIR_ENV} to "
            "a folder this user can write (every session on the machine must use the same)."
        ) from e
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield tickets
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _ticket_path(tickets: Path, pid: int) -> Path:
    return tickets / f"{socket.gethostname()}-{pid}.json"


def _alive(ticket: dict[str, Any]) -> bool:
    """True when the ticket's pid is alive and is the same process (same create time)."""
    try:
        proc = psutil.Process(int(ticket["pid"]))
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return abs(proc.create_time() - float(ticket["create_time"])) < 1.0
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # it exists; we just may not inspect it
    except (KeyError, TypeError, ValueError):
        return False


def _live_tickets(tickets: Path) -> list[dict[str, Any]]:
    """This host's tickets whose process is alive; the others are removed. Call under the lock."""
    host, live = socket.gethostname(), []
    for path in sorted(tickets.glob("*.json")):
        try:
            ticket = files.read_json(path)
        except (OSError, ValueError):
            with contextlib.suppress(OSError):
                if time.time() - path.stat().st_mtime > TORN_TICKET_S:
                    path.unlink()
            continue
        if not isinstance(ticket, dict) or ticket.get("host") != host:
            continue  # a queue folder shared over the network: another machine's runs
        if _alive(ticket):
            live.append(ticket)
        else:
            path.unlink(missing_ok=True)
    return live


def register(
    job_dir: str | os.PathLike[str], pid: int, create_time: float, queued_ts: float, key: str
) -> None:
    """Put a just-spawned job (a trainer, an evaluator) in the machine's queue for device `key`,
    in submission order (`jobs.start`)."""
    ticket = {
        "host": socket.gethostname(),
        "pid": pid,
        "create_time": create_time,
        "run_dir": str(Path(job_dir).resolve()),
        "key": key,
        "queued_ts": queued_ts,
        "state": "queued",
    }
    with _locked() as tickets:
        files.write_json(_ticket_path(tickets, pid), ticket)


def tickets() -> list[dict[str, Any]]:
    """This machine's live tickets ({run_dir, key, state, queued_ts, ...}), per device: the
    running ones first, then the queued ones in their order (what the app's queue panel shows)."""
    with _locked() as folder:
        live = _live_tickets(folder)
    return sorted(live, key=lambda t: (str(t.get("key")), t.get("state") != "running", _place(t)))


def leave() -> None:
    """Take this process's ticket out of the queue (the trainer, as it ends)."""
    me = psutil.Process()
    with _locked() as tickets:
        path = _ticket_path(tickets, me.pid)
        with contextlib.suppress(OSError, ValueError):
            if abs(float(files.read_json(path)["create_time"]) - me.create_time()) < 1.0:
                path.unlink()


def await_launcher(job_dir: str | os.PathLike[str], pid: int) -> None:
    """Wait until the launcher (`jobs.start`) has written our pid into the job's status, so
    our status writes never race with its own (normally milliseconds, HANDSHAKE_S at most)."""
    deadline = time.monotonic() + HANDSHAKE_S
    while files.read_status(job_dir).get("pid") != pid and time.monotonic() < deadline:
        time.sleep(0.02)


def _place(ticket: dict[str, Any]) -> tuple[float, str]:
    return float(ticket.get("queued_ts") or 0.0), str(ticket.get("run_dir"))


def _competition(tickets: Path, mine: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(run dirs queued before us, run dirs running) on any of our devices, from every runs
    dir."""
    ahead, running = [], []
    for other in _live_tickets(tickets):
        if other.get("pid") == mine["pid"] or not _overlap(other.get("key"), mine["key"]):
            continue
        if other.get("state") == "running":
            running.append(str(other.get("run_dir")))
        elif _place(other) < _place(mine):
            ahead.append(str(other.get("run_dir")))
    return ahead, running


def wait_turn(job_dir: str | os.PathLike[str], key: str | None = None) -> bool:
    """Block until this job may use its device, then mark it running. False: cancelled while
    queued. The device is `key`, else the one its launcher wrote (status `queue`), else the
    one the run's config resolves to (a trainer started by hand)."""
    job_dir = Path(job_dir).resolve()
    me = psutil.Process()
    await_launcher(job_dir, me.pid)
    key = key or files.read_status(job_dir).get("queue") or queue_key(files.read_config(job_dir))
    limit = max_concurrent()
    mine = {
        "host": socket.gethostname(),
        "pid": me.pid,
        "create_time": me.create_time(),
        "run_dir": str(job_dir),
        "key": key,
        "queued_ts": files.read_status(job_dir).get("queued_ts") or time.time(),
        "state": "queued",
    }
    with _locked() as tickets:
        # jobs.start registered us already; a trainer started some other way registers now.
        files.write_json(_ticket_path(tickets, me.pid), mine)
        files.update_status(job_dir, queue=key, pid=me.pid, pid_create_time=mine["create_time"])
    said = None
    while True:
        with _locked() as tickets:
            if files.cancel_requested(job_dir):
                _ticket_path(tickets, me.pid).unlink(missing_ok=True)
                files.update_status(job_dir, state="cancelled", finished_at=files.now_iso())
                print(f"[dragonfarm] {files.now_iso()} cancelled while queued.", flush=True)
                return False
            ahead, running = _competition(tickets, mine)
            if len(running) < limit and not ahead:
                files.write_json(_ticket_path(tickets, me.pid), {**mine, "state": "running"})
                now = files.now_iso()
                files.update_status(job_dir, state="running", started_at=now, heartbeat=now)
                # The key is the device the trainer resolves ("cpu", "cuda:0"): say it plainly.
                print(f"[dragonfarm] {now} running on {key}.", flush=True)
                return True
        if (len(ahead), len(running)) != said:
            said = (len(ahead), len(running))
            print(
                f"[dragonfarm] {files.now_iso()} waiting in queue {key}: {len(ahead)} run(s) "
                f"ahead, {len(running)} running (at most {limit} at once; the queue is shared "
                f"by every runs dir on this machine; running: {', '.join(running) or 'none'}).",
                flush=True,
            )
        time.sleep(POLL_S)
