"""Where reward commands run: a helper process that holds no secret and leaves nothing behind.

A command reward's program, and the model-written code it may run, can read
/proc/<pid>/environ of every process it can walk up to through its parents. So the commands are
not started by the app or the trainer (which may hold HF_TOKEN, a server's API key...) but by a
helper process (`serve`):

- Its environment is `childenv.child_env()`, the allow-list, and it is detached: the process the
  caller spawns forks the helper and exits at once, so the helper is reparented to init (or the
  nearest child subreaper) and the caller is not among the ancestors a command can read. Forking
  from the caller instead would not do: /proc/<pid>/environ shows the environment a process was
  exec'd with, and a forked child keeps its parent's.
- Before it starts one, the caller blanks what child_env would not pass from its own
  /proc/<pid>/environ (`childenv.hide_environ`): when the caller is itself the reaper the helper
  lands on (the app as PID 1 in a container), that is the copy a command would read.
- The helper is a child subreaper (prctl(PR_SET_CHILD_SUBREAPER), Linux): what a command leaves
  behind, double-forked or in a session of its own, is reparented to the helper, which kills
  and reaps all of it before it answers. Elsewhere (macOS) the command's process group and its
  visible descendants are killed, but a process that both setsid()s and double-forks escapes.
- The caller talks to a helper over the helper's stdin and stdout, one JSON line per request
  and per answer. A request runs a command (`run`), regex searches with a time limit
  (`search`, see `regex_search`: a search that never ends would freeze the caller) or a custom
  reward's function the same way (`custom`, see `custom_run`). A helper
  runs one command at a time (so whatever is left is that command's); the caller keeps a
  small pool so that `score()`'s threads run commands side by side. A helper whose stdin
  closes (its caller ended), or that has had nothing to do for a while, exits.

Each command runs from an argv list (never a shell), in a fresh temporary folder, with the
caller's child_env(), in its own process group, with stdout and stderr read incrementally and
only their last OUTPUT_CAP bytes kept. This is not isolation: the program can read and write
what the user running the training can (the Hugging Face token file in its cache folder too).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import select
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from dragonfarm_core.rewards import custom_run, regex_search
from dragonfarm_core.rewards.errors import RewardError
from dragonfarm_core.rundir import childenv, jobs

COMPLETION_FILE_TOKEN = "{completion_file}"
# Inside the command's working directory. A test-file name, so that `pytest` run there collects
# it even without the token (the manual's example); Python tools and most others accept it too.
COMPLETION_FILE_NAME = "test_completion.py"
OUTPUT_CAP = 64 * 1024
# After the program exits, how long its pipes may stay open (held by a leftover grandchild).
EXIT_GRACE_S = 0.5
# How long killing what a command left behind may take before the helper answers anyway.
LEFTOVER_S = 5.0
# How long a helper may take to start, and to answer beyond the command's own timeout.
START_S = 30.0
ANSWER_MARGIN_S = 30.0
# Idle helpers kept for the next commands (score() runs at most 8 side by side), each for up to
# IDLE_S; a helper itself exits after HELPER_IDLE_S without a request, later than its caller
# stops using it, so a request never goes to a helper that is just leaving.
MAX_IDLE = 8
IDLE_S = 60.0
HELPER_IDLE_S = 2 * IDLE_S
PR_SET_CHILD_SUBREAPER = 36
HELPER_CODE = "from dragonfarm_core.rewards.runner import serve; serve()"
_READ_CHUNK = 64 * 1024


# --- inside the helper --------------------------------------------------------------------------


class _Tail:
    """The last `cap` bytes written to a pipe; memory stays bounded whatever the program prints."""

    def __init__(self, cap: int) -> None:
        self.cap, self.data, self.truncated = cap, bytearray(), False

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > self.cap:
            del self.data[: len(self.data) - self.cap]
            self.truncated = True

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def execute(
    argv: list[str], completion: str, input: str, timeout: float, env: dict[str, str]
) -> dict[str, Any]:
    """Run argv on one completion; the fields of a CommandResult. Called inside the helper."""
    data = completion.encode("utf-8", errors="replace")
    with tempfile.TemporaryDirectory(
        prefix="dragonfarm-reward-", ignore_cleanup_errors=True
    ) as cwd:
        stdin: Any = subprocess.PIPE
        if input == "file":
            path = Path(cwd) / COMPLETION_FILE_NAME
            path.write_bytes(data)
            argv = [str(path) if a == COMPLETION_FILE_TOKEN else a for a in argv]
            stdin, data = subprocess.DEVNULL, b""
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
        try:
            out, err = _Tail(OUTPUT_CAP), _Tail(OUTPUT_CAP)
            timed_out = _pump(proc, data, out, err, time.monotonic() + timeout)
        finally:
            # SIGKILL at once; only its group: the zombie (see _exited) still holds its pid.
            jobs.kill_group(proc.pid, grace=0, group_only=True)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            proc.wait()
    return {
        "exit_code": None if timed_out else proc.returncode,
        "stdout": out.text(),
        "stderr": err.text(),
        "timed_out": timed_out,
        "truncated": out.truncated or err.truncated,
    }


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    # WNOWAIT leaves the zombie in place, so its pid (= our process group id) cannot be reused
    # by an unrelated process before kill_group runs.
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored): it has exited
        return True


def _pump(
    proc: subprocess.Popen[bytes], data: bytes, out: _Tail, err: _Tail, deadline: float
) -> bool:
    """Feed stdin and drain stdout/stderr until the program is done; True on timeout."""
    tails: dict[IO[bytes], _Tail] = {proc.stdout: out, proc.stderr: err}  # type: ignore[dict-item]
    with selectors.DefaultSelector() as sel:
        for pipe in tails:
            os.set_blocking(pipe.fileno(), False)
            sel.register(pipe, selectors.EVENT_READ)
        if proc.stdin is not None:
            if data:
                os.set_blocking(proc.stdin.fileno(), False)
                sel.register(proc.stdin, selectors.EVENT_WRITE)
            else:
                proc.stdin.close()
        view, exited_at = memoryview(data), None
        while True:
            now = time.monotonic()
            if exited_at is None and _exited(proc):
                exited_at = now
            if exited_at is not None and (not sel.get_map() or now - exited_at > EXIT_GRACE_S):
                return False
            if now >= deadline:
                return True
            if not sel.get_map():
                time.sleep(min(0.02, deadline - now))
                continue
            for key, _ in sel.select(min(0.1, deadline - now)):
                if key.fileobj is proc.stdin:
                    view = _feed(sel, proc.stdin, view)
                else:
                    _drain(sel, key.fileobj, tails[key.fileobj])  # type: ignore[index]


def _feed(sel: selectors.BaseSelector, pipe: IO[bytes], view: memoryview) -> memoryview:
    try:
        view = view[os.write(pipe.fileno(), view[:_READ_CHUNK]) :]
    except BlockingIOError:
        return view
    except BrokenPipeError:  # the program stopped reading: not our problem to report
        view = view[:0]
    if not view:
        sel.unregister(pipe)
        pipe.close()
    return view


def _drain(sel: selectors.BaseSelector, pipe: Any, tail: _Tail) -> None:
    try:
        chunk = os.read(pipe.fileno(), _READ_CHUNK)
    except BlockingIOError:
        return
    if chunk:
        tail.add(chunk)
    else:
        sel.unregister(pipe)


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux); False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def end_leftovers() -> None:
    """SIGKILL and reap every descendant of this process: what the last command left behind."""
    import psutil  # only the helper needs it here

    me, deadline = psutil.Process(), time.monotonic() + LEFTOVER_S
    while True:
        try:
            left = me.children(recursive=True)
        except psutil.Error:
            left = []
        if not left or time.monotonic() > deadline:
            break
        for proc in left:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        time.sleep(0.01)
        _reap()
    _reap()


def _send(out: IO[bytes], message: dict[str, Any]) -> None:
    out.write(json.dumps(message).encode("utf-8") + b"\n")
    out.flush()


def _requests(fd: int) -> Iterator[bytes]:
    """The lines read from fd, until it closes or stays silent for HELPER_IDLE_S."""
    buffer = b""
    while True:
        while b"\n" in buffer:
            line, _, buffer = buffer.partition(b"\n")
            yield line
        ready, _, _ = select.select([fd], [], [], HELPER_IDLE_S)
        chunk = os.read(fd, _READ_CHUNK) if ready else b""
        if not chunk:
            return
        buffer += chunk


OPERATIONS: dict[str, Callable[..., dict[str, Any]]] = {
    "command": execute,
    "regex": regex_search.search,
    "custom": custom_run.run_custom,
}


def serve() -> None:
    """The helper: detach, become a subreaper, then run one request per stdin line."""
    if os.fork():  # detach (module docstring): the spawned process ends, the helper goes on
        os._exit(0)
    os.setsid()
    subreaper = become_subreaper()
    stdout = sys.stdout.buffer
    _send(stdout, {"ready": os.getpid(), "subreaper": subreaper})
    for line in _requests(sys.stdin.fileno()):
        try:
            request = json.loads(line)
            answer = OPERATIONS[request.pop("op")](**request)
        except Exception:
            answer = {"error": traceback.format_exc()}
        finally:
            end_leftovers()
        _send(stdout, answer)


# --- in the caller ------------------------------------------------------------------------------


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rindex(")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None  # gone, or no /proc (macOS): not ours to reap


def _reap_pid(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


class _Helper:
    """One running helper: its pipes, and a buffer for its answer lines."""

    def __init__(self) -> None:
        # -c, not -m: the rewards package imports this module, and -m would run a second copy.
        argv = [sys.executable, "-c", HELPER_CODE]
        spawned = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=childenv.child_env(),
            cwd=tempfile.gettempdir(),
            close_fds=True,
            start_new_session=True,
        )
        assert spawned.stdin is not None and spawned.stdout is not None
        self.stdin, self.stdout, self.buffer = spawned.stdin, spawned.stdout, b""
        self.idle_since = time.monotonic()
        try:
            code = spawned.wait(START_S)  # it forks the helper and exits: no zombie is left
            hello = self._read(time.monotonic() + START_S) if code == 0 else {}
        except (subprocess.TimeoutExpired, OSError, ValueError):
            spawned.kill()
            spawned.wait()
            code, hello = None, {}
        if "ready" not in hello:
            self.close()
            raise RewardError(
                f"The helper that runs reward commands did not start ({' '.join(argv)} "
                f"exited with {code}); check that this Python can run dragonfarm_core."
            )
        self.pid: int = hello["ready"]
        if _parent(self.pid) == os.getpid():
            # The helper landed on us (we are the reaper: PID 1 in a container): reap it when
            # it ends, or it would stay a zombie of ours.
            threading.Thread(target=_reap_pid, args=(self.pid,), daemon=True).start()

    def _read(self, deadline: float) -> dict[str, Any]:
        fd = self.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer")
            with selectors.DefaultSelector() as sel:
                sel.register(fd, selectors.EVENT_READ)
                if not sel.select(left):
                    continue
            chunk = os.read(fd, _READ_CHUNK)
            if not chunk:
                raise EOFError("the helper ended")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)

    def ask(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.stdin.write(json.dumps(request).encode("utf-8") + b"\n")
        self.stdin.flush()
        return self._read(time.monotonic() + timeout)

    def close(self) -> None:
        """Close its stdin: it finishes its command, if any, and exits."""
        for pipe in (self.stdin, self.stdout):
            with contextlib.suppress(OSError):
                pipe.close()

    def kill(self) -> None:
        if getattr(self, "pid", None):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, signal.SIGKILL)
        self.close()


_idle: list[_Helper] = []
_idle_lock = threading.Lock()
_owner = os.getpid()  # helpers belong to the process that started them, not to a fork of it


def _take() -> _Helper:
    global _owner
    with _idle_lock:
        if _owner != os.getpid():
            _idle.clear()
            _owner = os.getpid()
        while _idle:
            helper = _idle.pop()
            if time.monotonic() - helper.idle_since < IDLE_S:
                return helper
            helper.close()  # it may be leaving by itself soon: let it go now
    childenv.hide_environ()
    return _Helper()


def _give_back(helper: _Helper) -> None:
    helper.idle_since = time.monotonic()
    with _idle_lock:
        if len(_idle) < MAX_IDLE and _owner == os.getpid():
            _idle.append(helper)
            return
    helper.close()


def _ask(request: dict[str, Any], timeout: float, what: str) -> dict[str, Any]:
    """Send one request to a helper; its answer, or RewardError when it fails or is late."""
    helper = _take()
    try:
        answer = helper.ask(request, timeout)
    except (TimeoutError, EOFError, OSError, ValueError) as e:
        helper.kill()
        raise RewardError(
            f"The helper that runs rewards (pid {helper.pid}) failed while running {what} "
            f"({e}); it was stopped and the next reward starts a new one."
        ) from None
    except BaseException:  # Ctrl-C: it finishes this request (up to its timeout) and exits
        helper.close()
        raise
    _give_back(helper)
    if "error" in answer:
        raise RewardError(f"The reward could not be run:\n{answer['error']}")
    return answer


def run(argv: list[str], completion: str, input: str, timeout: float) -> dict[str, Any]:
    """Run one command in a helper; the fields of a CommandResult."""
    request = {
        "op": "command",
        "argv": list(argv),
        "completion": completion,
        "input": input,
        "timeout": float(timeout),
        "env": childenv.child_env(),
    }
    wait = float(timeout) + LEFTOVER_S + ANSWER_MARGIN_S
    return _ask(request, wait, argv[0] if argv else "?")


def search(
    pattern: str, case_sensitive: bool, texts: list[str], timeout: float
) -> list[bool | None]:
    """The regex reward's search (builtin.regex_score) of each text, in a helper: whether the
    pattern is found, up to the first text whose search took longer than `timeout` seconds
    (and was killed), which is None and ends the list; the caller sends the rest again."""
    request = {"op": "regex", "pattern": pattern, "case_sensitive": case_sensitive,
               "texts": texts, "timeout": float(timeout)}  # fmt: skip
    wait = float(timeout) * max(1, len(texts)) + ANSWER_MARGIN_S
    return _ask(request, wait, f"the regex {pattern!r}")["found"]


def custom(file: str, fn: str, items: list[list[Any]], timeout: float) -> list[Any]:
    """A custom reward's function `fn` of `file`, imported and called on each [prompt,
    completion, reference, row] in a helper (`custom_run.run_custom`): the import's answer, then
    one per item, up to the first that took longer than `timeout` seconds (None, the last)."""
    request = {"op": "custom", "file": file, "fn": fn, "items": items, "timeout": float(timeout)}
    wait = float(timeout) * (1 + len(items)) + ANSWER_MARGIN_S
    return _ask(request, wait, f"the custom reward {fn}() of {file}")["answers"]


def close_all() -> None:
    """Let every idle helper exit (tests; a process's helpers also exit when it ends)."""
    with _idle_lock:
        helpers, _idle[:] = list(_idle), []
    for helper in helpers:
        helper.close()


# Their pipes closed at exit: the helpers would exit anyway, but Python warns of open files.
atexit.register(close_all)
