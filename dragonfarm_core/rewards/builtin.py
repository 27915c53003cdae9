"""The built-in verifiable rewards: pure functions that score one completion in [0, 1].

exact, contains and numeric are the metrics of the same name (`dragonfarm_core.rewards.task_metrics`), so a
reward and the evaluation metric that reports it can never disagree. The others read their
settings from the `Reward` that names them; `scoring.py` does the dispatch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from dragonfarm_core.rewards.task_metrics import contains, exact, numeric, parse_json

__all__ = [
    "contains",
    "exact",
    "json_score",
    "keyword_score",
    "length_score",
    "numeric",
    "regex_score",
]


def regex_score(completion: str, pattern: str, case_sensitive: bool = False) -> float:
    """1.0 when `pattern` is found anywhere in the completion (re.search).

    >>> regex_score("T-1234: refunded", r"^T-\\d{4}")
    1.0
    >>> regex_score("t-1234", r"^T-\\d{4}", case_sensitive=True)
    0.0
    """
    flags = 0 if case_sensitive else re.IGNORECASE
    return float(re.search(pattern, completion, flags) is not None)


def json_score(completion: str, keys: Sequence[str] | None = None) -> float:
    """Valid JSON (a reply that is one fenced block is unwrapped first) with the keys present.

    Without keys: 1.0 when valid. With keys: the share of them present at the top level of a
    JSON object; a valid non-object scores 0.

    >>> json_score('```json\\n{"id": 1, "status": "open"}\\n```', ["id", "status"])
    1.0
    >>> json_score('{"id": 1}', ["id", "status"])
    0.5
    >>> json_score("[1, 2]"), json_score("[1, 2]", ["id"]), json_score("{oops")
    (1.0, 0.0, 0.0)
    """
    ok, value = parse_json(completion)
    if not ok:
        return 0.0
    if not keys:
        return 1.0
    if not isinstance(value, dict):
        return 0.0
    return sum(key in value for key in keys) / len(keys)


def length_score(
    completion: str, min_chars: int | None = None, max_chars: int | None = None
) -> float:
    """1.0 for min_chars <= length <= max_chars (the completion stripped), falling linearly beyond.

    Below min_chars the score falls to 0 at 0 characters (length / min_chars); above max_chars
    it falls to 0 at twice max_chars (so a 50% overshoot scores 0.5).

    >>> length_score("x" * 300, max_chars=400), length_score("x" * 600, max_chars=400)
    (1.0, 0.5)
    >>> length_score("x" * 900, max_chars=400), length_score("x" * 25, min_chars=100)
    (0.0, 0.25)
    """
    n = len(completion.strip())
    if min_chars is not None and n < min_chars:
        return n / min_chars
    if max_chars is not None and n > max_chars:
        return max(0.0, 1.0 - (n - max_chars) / max_chars) if max_chars else 0.0
    return 1.0


def keyword_score(
    completion: str, words: Sequence[str], mode: str = "any", case_sensitive: bool = False
) -> float:
    """1.0 when any (mode="any") or all (mode="all") of `words` appear as whole words.

    Whole word means not inside a longer word: "refund" does not match "refunded", and words that
    start or end with symbols ("C++") still match.

    >>> keyword_score("We issued a Refund.", ["refund", "credit"])
    1.0
    >>> keyword_score("We issued a refund.", ["refund", "credit"], mode="all")
    0.0
    >>> keyword_score("refunded", ["refund"])
    0.0
    """
    flags = 0 if case_sensitive else re.IGNORECASE
    found = [
        re.search(rf"(?<!\w){re.escape(w)}(?!\w)", completion, flags) is not None for w in words
    ]
    return float(all(found) if mode == "all" else any(found))
