"""Start a run's trainer subprocess, tell whether it is still alive, and cancel it.

`start_run` spawns `python -m dragonfarm_core.trainers RUN_DIR` with an argv list (no shell), in
its own session (so it outlives the caller and can be stopped as a group), with its output going
to the run's log. The pid and the process's create time go into status.json: a pid alone can be
reused by an unrelated process after a reboot, the pair cannot. A run whose status says queued or
running but whose process is gone is reported failed (`interrupted`) with the log's tail.
Every child process the package starts (the trainer, the evaluator, the inference worker, the
reward-command helper) gets `child_env()`: an allow-list of what Python, torch, the Hugging Face
libraries and a run need, never the caller's whole environment. The app downloads models itself
(`models.resolve_model`, with the caller's HF_TOKEN) and a run's config names the local folder, so
no child needs a token. Pure standard library plus psutil: the app imports this.
"""

from __future__ import annotations

import contextlib
import ctypes
import fnmatch
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil

from dragonfarm_core.rundir import files, queue

# A run just written as queued has no pid for the few milliseconds its launcher needs to spawn
# it; a pid-less queued status younger than this is taken as starting, not as dead.
STARTUP_GRACE_S = 60.0
# After SIGTERM, how long the process group gets before SIGKILL.
KILL_GRACE_S = 5.0

# Trainer processes this Python process started and that have not been seen to end; a thread
# per child reaps it as it ends (no zombies that would look alive), and tests can stop them.
_children: dict[int, subprocess.Popen[bytes]] = {}


def trainer_command(run_dir: str | os.PathLike[str]) -> list[str]:
    return [sys.executable, "-m", "dragonfarm_core.trainers", str(run_dir)]


# What a child process may receive. An allow-list, because a list of secret-looking name
# fragments always misses one (DATABASE_URI, MY_SERVICE_PAT): whatever is not named here stays
# in the caller (HF_TOKEN, AWS_*, OPENAI_API_KEY, the server's API key...).
PASS_NAMES = frozenset(
    {
        # the process and its locale
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM",
        "TMPDIR", "TEMP", "TMP",
        # Python and the environment it runs in
        "PYTHONPATH", "PYTHONHOME", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
        "PYTHONHASHSEED", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONWARNINGS",
        "PYTHONFAULTHANDLER", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "PYTHONPYCACHEPREFIX",
        "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "LD_LIBRARY_PATH",
        "COVERAGE_PROCESS_START",
        # compilers that torch.compile / triton may call
        "CC", "CXX", "CPATH", "LIBRARY_PATH",
        # TLS trust, and the proxy exceptions (proxies: PROXY_NAMES)
        "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
        "NO_PROXY", "no_proxy",
        # devices and threads beyond the prefixes below
        "GPU_DEVICE_ORDINAL", "VECLIB_MAXIMUM_THREADS", "TOKENIZERS_PARALLELISM",
        # Hugging Face: cache folders, endpoint and offline switches; never a token
        "HF_HOME", "HF_ENDPOINT", "HF_DATASETS_CACHE", "HF_DATASETS_OFFLINE", "HF_MODULES_CACHE",
        "HF_ASSETS_CACHE", "HUGGINGFACE_HUB_CACHE", "HUGGINGFACE_ASSETS_CACHE",
        "TRANSFORMERS_CACHE", "TRANSFORMERS_OFFLINE", "TRANSFORMERS_VERBOSITY",
    }
)  # fmt: skip
# Families of settings, each passed unless its name looks like a secret (SECRET_WORDS):
# DRAGONFARM_BACKEND passes, DRAGONFARM_BACKEND_API_KEY does not.
PASS_PREFIXES = (
    "LC_", "XDG_", "DRAGONFARM_", "HF_HUB_", "HF_XET_",
    "CUDA_", "NVIDIA_", "HIP_", "HSA_", "ROCM_", "ROCR_", "PYTORCH_", "TORCH", "TRITON_", "NCCL_",
    "BNB_", "ACCELERATE_", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "NUMEXPR_",
)  # fmt: skip
SECRET_WORDS = (
    "TOKEN", "KEY", "SECRET", "PASSW", "CREDENTIAL", "AUTH", "COOKIE", "SESSION", "PRIVATE",
    "_PAT", "SIGNATURE",
)  # fmt: skip
# Extra names (comma-separated; NAME_* for a family) the user wants children to receive. Reward
# commands receive them too, so never list a secret here.
PASS_ENV_VAR = "DRAGONFARM_PASS_ENV"
# Passed unless the URL carries a user or password (a secret like any other).
PROXY_NAMES = frozenset(
    {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"}
)


def _extra_names(environ: Mapping[str, str]) -> list[str]:
    raw = environ.get(PASS_ENV_VAR, "")
    return [p for p in raw.replace(",", " ").split() if p]


def passes(name: str, value: str, extra: list[str] | tuple[str, ...] = ()) -> bool:
    """Whether a child process receives this variable (see PASS_NAMES and PASS_PREFIXES).

    >>> passes("CUDA_VISIBLE_DEVICES", "0"), passes("HF_TOKEN", "hf_x"), passes("DATABASE_URI", "")
    (True, False, False)
    >>> passes("DRAGONFARM_MAX_CONCURRENT", "2"), passes("DRAGONFARM_BACKEND_API_KEY", "sk")
    (True, False)
    """
    if any(fnmatch.fnmatchcase(name, pattern) for pattern in extra):
        return True
    if name in PROXY_NAMES:
        try:
            parts = urlsplit(value if "//" in value else f"//{value}")
            return parts.username is None and parts.password is None
        except ValueError:
            return False
    if name in PASS_NAMES:
        return True
    upper = name.upper()
    return upper.startswith(PASS_PREFIXES) and not any(w in upper for w in SECRET_WORDS)


def child_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a child process: the allow-listed part of `environ` (default: this
    process's), with this package importable and output unbuffered.

    The one place that decides what a child sees: the trainer, the evaluator, the inference
    worker, the reward-command helper and the reward commands all get this.

    >>> env = child_env({"PATH": "/bin", "HF_TOKEN": "hf_x", "MY_SERVICE_PAT": "p", "X": "1"})
    >>> sorted(env)
    ['PATH', 'PYTHONPATH', 'PYTHONUNBUFFERED']
    """
    environ = os.environ if environ is None else environ
    extra = _extra_names(environ)
    env = {k: v for k, v in environ.items() if passes(k, v, extra)}
    package_parent = str(Path(__file__).resolve().parents[2])
    paths = [p for p in (environ.get("PYTHONPATH") or "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([package_parent, *paths]))
    env["PYTHONUNBUFFERED"] = "1"  # log lines reach train.log as they are printed
    return env


def hide_environ() -> bool:
    """Blank, in this process's /proc/<pid>/environ, every variable `child_env` would not pass.

    /proc/<pid>/environ shows the memory that held the environment at exec, whatever os.environ
    says since; any process of the same user can read it, and a reward command can when this
    process is its reaper (the app as PID 1 in a container, where orphans land). The strings
    there are overwritten in place, and each variable is set again from os.environ, so this
    process and what it starts see the same values as before (they now live on the heap, which
    /proc does not show). Linux only (False elsewhere, or when the area cannot be checked).
    """
    global _environ_hidden
    if not sys.platform.startswith("linux"):
        return False
    with _hide_lock:
        if not _environ_hidden:  # the area is fixed at exec: once is enough
            _environ_hidden = _hide_environ()
        return _environ_hidden


_hide_lock = threading.Lock()
_environ_hidden = False


def _hide_environ() -> bool:
    try:
        stat = Path("/proc/self/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (man 5 proc)
        shown = Path("/proc/self/environ").read_bytes()
        # Write only where the kernel says the environment is, and only if it holds what
        # /proc shows: anything else and this does nothing.
        if not start or end <= start or ctypes.string_at(start, end - start) != shown:
            return False
    except (OSError, ValueError, IndexError):
        return False
    extra = _extra_names(os.environ)
    offset, hidden = 0, set()
    for entry in shown.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        size = len(entry)
        if sep and size > 2 and not passes(os.fsdecode(name), os.fsdecode(value), extra):
            # A name of underscores, one per length, so the C-level entry can be unset by name.
            blank = b"_" * (size - 1) + b"="
            ctypes.memmove(start + offset, blank, size)
            hidden.add((os.fsdecode(name), os.fsdecode(blank[:-1])))
        offset += size + 1
    for name, blank_name in hidden:
        with contextlib.suppress(OSError, ValueError):
            os.unsetenv(blank_name)
            if name in os.environ:  # not unset since start: give C code its value back
                os.putenv(name, os.environ[name])
    return True


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
    for pid in [pid for pid, child in _children.items() if child.returncode is not None]:
        del _children[pid]  # ended and reaped
    _children[proc.pid] = proc
    # Reaped the moment it ends, not at the next launch: until then it would be a zombie of
    # this process (alive to ps), and in a long-lived app they would pile up.
    threading.Thread(target=proc.wait, name=f"dragonfarm-reap-{proc.pid}", daemon=True).start()
    try:
        created: float | None = psutil.Process(proc.pid).create_time()
    except psutil.NoSuchProcess:
        created = None  # it died at once; live_status will report it with the log's tail
    if created is not None:  # its place in the machine's queue is the moment it was submitted
        # An unusable queue folder: the trainer meets it too, and says so in its log.
        with contextlib.suppress(OSError):
            queue.register(run_dir, proc.pid, created, queued["queued_ts"])
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
