"""The functions Go's text/template offers that Ollama's prompt templates use, with Go's rules:
`eq ne lt le gt ge and or not len index slice print printf`, Go's truth and how a value prints.
`gotemplate_parse` refuses a call of any other name; `gotemplate` evaluates them. The error
every part raises, GoTemplateError, is defined here, below both.
Pure standard library.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any


class GoTemplateError(ValueError):
    """A template outside the supported subset, or an error while rendering it."""


def truth(value: Any) -> bool:
    """Go's truth: false, 0, "", nil and empty collections are false."""
    if value is None or value is False:
        return False
    if isinstance(value, int | float | str | list | tuple | dict):
        return bool(value)
    return True


def text_of(value: Any) -> str:
    """How Go prints a value in a template."""
    if value is None:
        return "<no value>"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list | tuple):
        return "[" + " ".join(text_of(v) for v in value) + "]"
    return str(value)


def _eq(a: Any, *others: Any) -> bool:
    if not others:
        raise GoTemplateError("eq needs at least two arguments")
    return any(a == b for b in others)


def _compare(op: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    def compare(a: Any, b: Any) -> bool:
        if type(a) is not type(b) and not (
            isinstance(a, int | float) and isinstance(b, int | float)
        ):
            raise GoTemplateError(f"incompatible types for comparison: {a!r}, {b!r}")
        return op(a, b)

    return compare


def _len(value: Any) -> int:
    if not isinstance(value, str | list | tuple | dict):
        raise GoTemplateError(f"len of {type(value).__name__}")
    return len(value.encode() if isinstance(value, str) else value)


def _index(value: Any, *keys: Any) -> Any:
    for key in keys:
        if isinstance(value, dict):
            value = value.get(key)
        elif isinstance(value, list | tuple | str):
            if not isinstance(key, int) or not 0 <= key < len(value):
                raise GoTemplateError(f"index {key!r} out of range")
            value = value[key]
        else:
            raise GoTemplateError(f"cannot index {type(value).__name__}")
    return value


def _slice(value: Any, *bounds: int) -> Any:
    if not isinstance(value, str | list | tuple) or len(bounds) > 2:
        raise GoTemplateError("slice takes a string or a list and up to two bounds")
    lo = bounds[0] if bounds else 0
    hi = bounds[1] if len(bounds) > 1 else len(value)
    if not 0 <= lo <= hi <= len(value):
        raise GoTemplateError(f"slice bounds {lo}:{hi} out of range")
    return value[lo:hi]


def _print(*values: Any) -> str:
    # fmt.Sprint: a space between operands when neither is a string.
    out = ""
    for i, v in enumerate(values):
        if i and not isinstance(v, str) and not isinstance(values[i - 1], str):
            out += " "
        out += text_of(v)
    return out


def _printf(form: str, *values: Any) -> str:
    pieces = re.split(r"(%[svdq%])", form)
    out, args = [], list(values)
    for piece in pieces:
        if piece == "%%":
            out.append("%")
        elif piece in ("%s", "%v", "%d"):
            if not args:
                out.append(f"%!{piece[1]}(MISSING)")
            else:
                out.append(text_of(args.pop(0)))
        elif piece == "%q":
            out.append('"' + str(args.pop(0)).replace("\\", "\\\\").replace('"', '\\"') + '"')
        else:
            out.append(piece)
    return "".join(out)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "eq": _eq,
    "ne": lambda a, b: not _eq(a, b),
    "lt": _compare(lambda a, b: a < b),
    "le": _compare(lambda a, b: a <= b),
    "gt": _compare(lambda a, b: a > b),
    "ge": _compare(lambda a, b: a >= b),
    "not": lambda a: not truth(a),
    "len": _len,
    "index": _index,
    "slice": _slice,
    "print": _print,
    "printf": _printf,
}
# Evaluated by the renderer itself: they stop at the first operand that decides (Go 1.18+).
LAZY = frozenset({"and", "or"})
