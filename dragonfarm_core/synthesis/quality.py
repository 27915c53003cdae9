"""Synthesis's quality pass and the checks of its settings.

    asked, dropped = fresh_prompts(rows, dedupe=True)     # blank and repeated prompts go first
    texts, more = quality_pass(asked, replies, min_chars=1, max_chars=None,
                               min_alpha_ratio=0, dedupe=True, threshold=0.92)
    garbled("1234 5678", min_alpha_ratio=0.5)              # True: under half of it letters

Replies that failed (a refusal, an empty answer, an error), are too short or too long, look
garbled, or repeat or nearly repeat an earlier reply (`data.neardup.repeats`, the data report's
MinHash/rapidfuzz code) are dropped, each with its reason. `check_settings` refuses an
out-of-range setting of `synthesize` / `synthesize_pairs` by name, before anything is asked.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Any

from dragonfarm_core.data.neardup import repeats
from dragonfarm_core.inference.protocol import Sampling
from dragonfarm_core.judging.judges import reply_failure
from dragonfarm_core.llm.base import Reply
from dragonfarm_core.synthesis.asking import PromptRow
from dragonfarm_core.synthesis.files import TAG

# A character that only shows up in broken text: the replacement character (bytes that were
# not valid in their encoding) or a control character other than tab and newlines.
_BROKEN = re.compile(r"[\ufffd\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def garbled(text: str, min_alpha_ratio: float = 0.0) -> bool:
    """Broken characters (U+FFFD, control characters), or fewer letters among the visible
    characters than `min_alpha_ratio` (0.5: at least half of them letters)."""
    if _BROKEN.search(text):
        return True
    visible = [c for c in text if not c.isspace()]
    if not visible or min_alpha_ratio <= 0:
        return False
    letters = sum(unicodedata.category(c).startswith("L") for c in visible)
    return letters / len(visible) < min_alpha_ratio


def reply_reason(reply: Reply) -> str | None:
    """Why a reply is no answer: "refusal", "error" or "empty" (`judging.reply_failure`
    without the error's text); None when it is one."""
    failure = reply_failure(reply)
    return failure.split(":")[0] if failure else None


def fresh_prompts(rows: list[PromptRow], dedupe: bool) -> tuple[list[int], dict[int, str]]:
    """Indexes of the rows worth asking, and the reason of each one that is not."""
    seen: set[tuple[str, str | None]] = set()
    keep, dropped = [], {}
    for i, row in enumerate(rows):
        key = (row.prompt.strip(), row.system)
        if not key[0]:
            dropped[i] = "empty_prompt"
        elif dedupe and key in seen:
            dropped[i] = "duplicate_prompt"
        else:
            seen.add(key)
            keep.append(i)
    return keep, dropped


def quality_pass(
    asked: list[int],
    replies: list[list[Reply]],
    *,
    min_chars: int,
    max_chars: int | None,
    min_alpha_ratio: float,
    dedupe: bool,
    threshold: float,
) -> tuple[dict[int, str], dict[int, str]]:
    """(row -> kept reply text, row -> why its reply was dropped) for the rows `asked`, each
    with its one reply: failed, too short or long, garbled; then, with dedupe, repeats of an
    earlier kept reply, exactly or at `threshold` similarity (0-1)."""
    texts: dict[int, str] = {}
    dropped: dict[int, str] = {}
    for i, [reply] in zip(asked, replies, strict=True):
        text = reply.text.strip()
        reason = reply_reason(reply)
        if reason is None and len(text) < min_chars:
            reason = "too_short"
        elif reason is None and max_chars is not None and len(text) > max_chars:
            reason = "too_long"
        elif reason is None and garbled(text, min_alpha_ratio):
            reason = "garbled"
        if reason:
            dropped[i] = reason
        else:
            texts[i] = text
    if dedupe:
        order = sorted(texts)
        for i, seen in zip(order, repeats([texts[i] for i in order], threshold * 100), strict=True):
            if seen is not None:
                dropped[i] = (
                    "duplicate_response" if seen[0] == "exact" else "near_duplicate_response"
                )
                del texts[i]
    return texts, dropped


# -- checks ---------------------------------------------------------------------------------


def _whole(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} = {value!r}; use a whole number, {low} or more.")
    return value


def _number(name: str, value: Any, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ValueError(f"{name} = {value!r}; use a number from {low:g} to {high:g}.")
    return float(value)


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not TAG.sub("", name).strip("-."):
        raise ValueError(f"name = {name!r}: use letters, digits, '-', '_' or '.'.")
    return name


def check_settings(function: str, **settings: Any) -> None:
    """Refuse a setting of `synthesize` / `synthesize_pairs` that is out of range, naming it
    (also what the app checks before it starts a job)."""
    given = {k: v for k, v in settings.items() if v is not None or k == "max_chars"}
    checks: dict[str, Callable[[Any], Any]] = {
        "max_new_tokens": lambda v: _whole("max_new_tokens", v, 1),
        "temperature": lambda v: _number("temperature", v, 0, 2),
        "name": _check_name,
    }
    if function == "synthesize":
        min_chars = _whole("min_chars", given.get("min_chars", 1), 0)
        checks |= {
            "min_score": lambda v: _number("min_score", v, 1, 10),
            "near_dup_threshold": lambda v: _number("near_dup_threshold", v, 0.01, 1),
            "max_chars": lambda v: v is None or _whole("max_chars", v, max(1, min_chars)),
            "min_alpha_ratio": lambda v: _number("min_alpha_ratio", v, 0, 1),
        }
    else:
        checks |= {
            "min_gap": lambda v: _number("min_gap", v, 0, 9),
            "n_samples": lambda v: _whole("n_samples", v, 2),
            "seed": lambda v: Sampling(seed=v),  # the range every inference backend takes
        }
    for key, value in given.items():
        if key in checks:
            checks[key](value)
