"""What a status.json may hold: its states, the type of each known field, and the check.

A run's status.json and a job's (`jobs`) have one format. `parse_status` turns the bytes of
such a file into a status, or says what is wrong with it as the end of a sentence; `files`
reads the file, retries a bad read and reports a file that stays bad as state DAMAGED.
Pure standard library: the trainer and the app both import it.
"""

from __future__ import annotations

import json
from typing import Any

STATES = ("queued", "running", "succeeded", "failed", "cancelled", "bundled")
TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})
ACTIVE_STATES = frozenset({"queued", "running"})
# Reported by files.read_status for a status.json that cannot be read as a status; never written.
DAMAGED = "damaged"
# A running run past its last step, measuring the held-out rows and writing samples: `phase`.
FINISHING = "finishing"
# The type each known status field must have when present (None is always allowed).
_WHOLE = ("pid", "step", "total_steps", "params_trainable", "params_total", "truncated_rows")
_TEXT = ("queued_at", "started_at", "finished_at", "heartbeat", "reason", "error", "device",
         "dtype", "queue", "resumed_from", "kind", "phase")  # fmt: skip
STATUS_FIELDS: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(_WHOLE, (int,)),
    **dict.fromkeys(("pid_create_time", "queued_ts", "epoch", "peak_memory_mib"), (int, float)),
    **dict.fromkeys(_TEXT, (str,)),
    "metrics": (dict,),
    "judge": (dict,),  # the latest judge() summary (judgement.py)
    "log_tail": (list,),
}
_KIND_NAMES = {int: "a whole number", float: "a number", str: "a string", dict: "an object",
              list: "a list", bool: "true or false"}  # fmt: skip


def status_problem(status: Any) -> str | None:
    """What makes `status` not a status (wrong shape, unknown state, a field of the wrong
    type), as the end of a sentence; None when it is fine."""
    if not isinstance(status, dict):
        return f"it holds a JSON {type(status).__name__}, not an object"
    state = status.get("state")
    if state not in STATES:
        got = "no state" if state is None else f"the state {state!r:.40}"
        return f"it names {got}, not one of {', '.join(STATES)}"
    return field_problem(status, STATUS_FIELDS)


def field_problem(
    values: dict[str, Any], fields: dict[str, tuple[type, ...]], where: str = ""
) -> str | None:
    """The first of `fields` whose value in `values` has the wrong type (None is allowed), as
    the end of a sentence ("its step is 'three', not a whole number"); None when all fit.
    `where` prefixes the name of a field in a group ("model.")."""
    for key, kinds in fields.items():
        value = values.get(key)
        if value is None:
            continue
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            wanted = " or ".join(_KIND_NAMES[k] for k in kinds)
            return f"its {where}{key} is {value!r:.40}, not {wanted}"
    return None


def parse_status(data: bytes) -> tuple[dict[str, Any], str | None]:
    """(status, None), or ({}, what is wrong with these bytes as a status.json)."""
    if not data.strip():
        return {}, "it is empty"
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        return {}, f"byte {e.start} is not UTF-8 text"
    except json.JSONDecodeError as e:
        return {}, f"it is not valid JSON ({e.msg}: line {e.lineno}, column {e.colno})"
    problem = status_problem(value)
    return (value, None) if problem is None else ({}, problem)
