"""Regex searches with a time limit, run inside the reward helper (`runner.serve`).

Python's `re` runs a search in C without releasing the GIL and cannot be interrupted: a pattern
that backtracks catastrophically, such as `(.+)+\\x00` on 40 characters, would freeze every
thread of the process that runs it (all of the app's requests; the trainer and the device queue
behind it). So the searches run in a child forked from the helper, which the helper kills when
one of them takes too long; the helper itself, and the app or trainer waiting on it, stay free.
One child searches a whole batch of completions (a fork costs tens of milliseconds when the
machine is busy), answering one byte per completion as it goes.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from typing import Any

from dragonfarm_core.rewards.builtin import regex_score


def search(pattern: str, case_sensitive: bool, texts: list[str], timeout: float) -> dict[str, Any]:
    """{"found": [...]}: for each text in turn, whether `builtin.regex_score` finds the pattern,
    until one takes longer than `timeout` seconds; that one is None and the list ends there."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one byte per text, then leave without running any cleanup
        os.close(read)
        code = 1
        try:
            for text in texts:
                os.write(write, b"1" if regex_score(text, pattern, case_sensitive) else b"0")
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    try:
        found = _answers(read, len(texts), timeout)
    finally:
        os.close(read)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return {"found": found}


def _answers(fd: int, n: int, timeout: float) -> list[bool | None]:
    """The child's answers, each given `timeout` seconds from the one before."""
    found: list[bool | None] = []
    deadline = time.monotonic() + timeout
    while len(found) < n:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            if left <= 0:
                return [*found, None]
            continue
        chunk = os.read(fd, n)
        if not chunk:
            raise RuntimeError(
                f"the search ended after {len(found)} of {n} texts without an answer"
            )
        found += [byte == ord("1") for byte in chunk]
        deadline = time.monotonic() + timeout
    return found
