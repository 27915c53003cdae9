"""Custom (Python function) rewards with a time limit, run inside the reward helper
(`runner.serve`), for the app's side: the check made when the reward is created and the dry run.

The function is the user's code: a loop without end, or a C call that holds the GIL, would
freeze whatever process runs it, and in the app that is every request. So the file is imported,
and the function called, in a child forked from the helper, which kills it when one step takes
longer than the limit, as `regex_search` runs patterns; the helper, and the app waiting on it,
stay free. The child answers one JSON line for the import, then one per completion, as it goes;
its own stdin, stdout and stderr are /dev/null, so nothing it prints reaches the helper's pipe.
The trainer calls the function itself (`scoring.score_one`): it is a process of its own, and a
reward may keep state (a loaded classifier) from one batch to the next.
"""

from __future__ import annotations

import contextlib
import json
import math
import numbers
import os
import select
import signal
import time
import traceback
from typing import Any

from dragonfarm_core.rewards.custom import load_function
from dragonfarm_core.rewards.errors import RewardError

TRACEBACK_CAP = 4000  # characters of a failure's traceback sent back
# How long the file may take to import when the reward is created, and the function on one
# completion in the dry run: a command reward's default timeout, far above a scorer's work.
CUSTOM_TIMEOUT_S = 30.0


def run_custom(file: str, fn: str, items: list[list[Any]], timeout: float) -> dict[str, Any]:
    """{"answers": [...]}: first the import's ({"loaded": True} or {"error": why}), then for
    each [prompt, completion, reference, row] in turn {"value": x}, {"error": ..., "traceback":
    ...} or {"not_number": repr, "type": name}, until one takes longer than `timeout` seconds:
    that one is None and the list ends there."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer line by line, then leave without running any cleanup
        os.close(read)
        code = 1
        try:
            _answer(os.fdopen(write, "w", encoding="utf-8"), file, fn, items)
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    try:
        answers = _lines(read, 1 + len(items), timeout)
    finally:
        os.close(read)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return {"answers": answers}


def _answer(out: Any, file: str, fn: str, items: list[list[Any]]) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the user's prints must not reach the helper's answer pipe
        os.dup2(null, fd)
    try:
        func = load_function(file, fn)
    except RewardError as e:
        out.write(json.dumps({"error": str(e)}) + "\n")
        return
    out.write(json.dumps({"loaded": True}) + "\n")
    out.flush()
    for prompt, completion, reference, row in items:
        answer: dict[str, Any]
        try:
            value = func(prompt, completion, reference, row)
        except Exception as e:
            tb = traceback.format_exc()[-TRACEBACK_CAP:]
            answer = {"error": f"{type(e).__name__}: {e}"[:TRACEBACK_CAP], "traceback": tb}
        else:
            if isinstance(value, numbers.Real):  # bool counts: True is 1
                number = float(value)
                answer = {"value": number if math.isfinite(number) else str(number)}
            else:
                answer = {"not_number": repr(value)[:200], "type": type(value).__name__}
        out.write(json.dumps(answer) + "\n")
        out.flush()


def _lines(fd: int, n: int, timeout: float) -> list[dict[str, Any] | None]:
    """The child's answers, each given `timeout` seconds from the one before; fewer when the
    child stopped (an import failure ends the list)."""
    answers: list[dict[str, Any] | None] = []
    buffer, deadline = b"", time.monotonic() + timeout
    while len(answers) < n:
        while b"\n" in buffer and len(answers) < n:
            line, _, buffer = buffer.partition(b"\n")
            answer = json.loads(line)
            answers.append(answer)
            deadline = time.monotonic() + timeout
            if len(answers) == 1 and "error" in answer:
                return answers
        if len(answers) == n:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            return [*answers, None]
        if not select.select([fd], [], [], left)[0]:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            raise RuntimeError(
                f"the custom reward ended after {len(answers)} of {n} answers without the rest "
                "(it called os._exit, or was killed)"
            )
        buffer += chunk
    return answers
