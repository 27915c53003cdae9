"""The "command" reward: score a completion by running a program on it (a test suite, a linter).

The completion is untrusted text written by a model in training, so the program runs:
- from an argv list, never through a shell: the completion's text never reaches a command line;
  it goes to stdin, or into a file whose path replaces each argument that is exactly
  "{completion_file}";
- in a fresh temporary working directory, with API keys and tokens removed from its environment;
- in its own process group, killed as a whole (grandchildren too) at the timeout, and as soon as
  the program itself exits, so a leftover background process cannot hold the reward up;
- with stdout and stderr read incrementally and only their last 64 KiB kept.

It is not a sandbox: the program can read and write what the user running the training can.
A process that starts its own session (setsid) escapes the group kill.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from dragonfarm_core.metrics import last_number
from dragonfarm_core.rewards.errors import RewardError

COMPLETION_FILE_TOKEN = "{completion_file}"
# Inside the command's working directory. A test-file name, so that `pytest` run there collects
# it even without the token (the manual's example); Python tools and most others accept it too.
COMPLETION_FILE_NAME = "test_completion.py"
OUTPUT_CAP = 64 * 1024
# After the program exits, how long its pipes may stay open (held by a leftover grandchild).
EXIT_GRACE_S = 0.5
_READ_CHUNK = 64 * 1024
# Substrings of environment variable names that may hold a secret (checked case-insensitively).
SECRET_MARKERS = (
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "HF_",
    "HUGGING",
    "OPENAI",
    "ANTHROPIC",
    "AWS_",
    "AZURE",
    "GOOGLE",
    "GITHUB",
    "GH_",
    "WANDB",
    "DATABASE_URL",
)


def parse_command(command: str | Sequence[str]) -> tuple[str, ...]:
    """An argv tuple. A string is split like a shell would split words, but never run by one.

    >>> parse_command("pytest -q '{completion_file}'")
    ('pytest', '-q', '{completion_file}')
    """
    if isinstance(command, str):
        try:
            return tuple(shlex.split(command))
        except ValueError as e:
            raise RewardError(
                f"Reward.command {command!r} cannot be split into arguments: {e}; "
                "pass a list of arguments instead."
            ) from e
    if not all(isinstance(a, str) for a in command):
        raise RewardError(f"Reward.command must be a list of strings, got {list(command)!r}.")
    return tuple(command)


def check_command(argv: Sequence[str], input: str) -> None:
    """Raise RewardError unless argv can run here with this input mode."""
    if not argv or not argv[0]:
        raise RewardError(
            "Reward.command is empty; give the program and its arguments, "
            'e.g. ["pytest", "-q", "{completion_file}"].'
        )
    program = argv[0]
    found = (
        (os.path.isfile(program) and os.access(program, os.X_OK))
        if os.sep in program
        else shutil.which(program) is not None
    )
    if not found:
        raise RewardError(
            f"Reward.command: the program {program!r} was not found on this machine "
            "(PATH or path); install it or give its full path."
        )
    tokens = sum(a == COMPLETION_FILE_TOKEN for a in argv)
    embedded = [a for a in argv if COMPLETION_FILE_TOKEN in a and a != COMPLETION_FILE_TOKEN]
    if embedded:
        raise RewardError(
            f"Reward.command: {embedded[0]!r} contains {COMPLETION_FILE_TOKEN} "
            "inside a longer argument; only a whole argument is replaced, so make "
            "it an argument of its own."
        )
    if tokens and input != "file":
        raise RewardError(
            f"Reward.command uses {COMPLETION_FILE_TOKEN} but Reward.input is "
            f"{input!r}; set input='file' to pass the completion as a file."
        )


def scrubbed_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment minus every variable whose name suggests a secret.

    >>> sorted(scrubbed_env({"PATH": "/bin", "OPENAI_API_KEY": "sk", "HF_TOKEN": "x"}))
    ['PATH']
    """
    environ = os.environ if environ is None else environ
    return {
        k: v
        for k, v in environ.items()
        if not any(marker in k.upper() for marker in SECRET_MARKERS)
    }


@dataclass(frozen=True)
class CommandResult:
    """What one run of the command did: exit code (None when killed at the timeout), the last
    OUTPUT_CAP bytes of stdout and stderr, and whether output was cut."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool


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


def run_command(
    argv: Sequence[str], completion: str, input: str = "stdin", timeout: float = 30.0
) -> CommandResult:
    """Run argv on one completion (see the module docstring for the guarantees)."""
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
            env=scrubbed_env(),
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
            _kill_group(proc)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            proc.wait()
    return CommandResult(
        None if timed_out else proc.returncode,
        out.text(),
        err.text(),
        timed_out,
        out.truncated or err.truncated,
    )


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    # WNOWAIT leaves the zombie in place, so its pid (= our process group id) cannot be reused
    # by an unrelated process before _kill_group runs.
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


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is already gone
        os.killpg(proc.pid, signal.SIGKILL)


def command_score(
    result: CommandResult,
    score_from: str = "exit_code",
    min_score: float = 0.0,
    max_score: float = 1.0,
) -> float:
    """Exit code 0 -> 1.0 else 0.0; or the last number on stdout scaled from
    min_score..max_score into 0..1 and clipped. A timeout, or no number printed, scores 0.

    >>> ok = CommandResult(0, "10 tests, score:\\n7\\n", "", False, False)
    >>> command_score(ok), command_score(ok, "stdout", 0, 10)
    (1.0, 0.7)
    """
    if result.timed_out:
        return 0.0
    if score_from == "exit_code":
        return float(result.exit_code == 0)
    value = last_number(result.stdout)
    if value is None:
        return 0.0
    return min(1.0, max(0.0, (value - min_score) / (max_score - min_score)))
