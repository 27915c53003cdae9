"""The "command" reward: score a completion by running a program on it (a test suite, a linter).

The completion is untrusted text written by a model in training, so the program runs (see
`runner` for how):
- from an argv list, never through a shell: the completion's text never reaches a command line;
  it goes to stdin, or into a file whose path replaces each argument that is exactly
  "{completion_file}";
- in a fresh temporary working directory, with the allow-listed environment of every child
  process (`childenv.child_env`: no tokens, no API keys, nothing unlisted);
- started by a helper process that holds no secret and is not a descendant of the app or the
  trainer, so no process the program can walk up to holds a secret in its environment;
- in its own process group, killed as a whole (grandchildren too) at the timeout and as soon as
  the program itself exits, and then, on Linux, everything it left behind (double-forked or in a
  session of its own) is killed too: a leftover background process cannot hold the reward up;
- with stdout and stderr read incrementally and only their last 64 KiB kept.

It is not a sandbox: the program can read and write what the user running the training can.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import dataclass

from dragonfarm_core.rewards import runner
from dragonfarm_core.rewards.errors import RewardError
from dragonfarm_core.rewards.task_metrics import last_number

COMPLETION_FILE_TOKEN = runner.COMPLETION_FILE_TOKEN
COMPLETION_FILE_NAME = runner.COMPLETION_FILE_NAME
OUTPUT_CAP = runner.OUTPUT_CAP


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


@dataclass(frozen=True)
class CommandResult:
    """What one run of the command did: exit code (None when killed at the timeout), the last
    OUTPUT_CAP bytes of stdout and stderr, and whether output was cut."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool


def run_command(
    argv: Sequence[str], completion: str, input: str = "stdin", timeout: float = 30.0
) -> CommandResult:
    """Run argv on one completion (see the module docstring for the guarantees)."""
    return CommandResult(**runner.run(list(argv), completion, input, timeout))


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
