"""Task metrics for generated replies: deterministic checks that need no judge model.

`dragon.evaluate` scores a run's held-out replies with them, and the built-in rewards in
`dragonfarm_core.rewards` reuse the same text rules, so a metric and the reward of the same name
always agree. Every metric is a pure function of ONE triple of strings,
`metric(generated, reference, prompt) -> float` (0.0 or 1.0 for pass/fail checks; None is read as
""); `apply_metrics` runs a set of them over whole columns.

    >>> m = metrics()
    >>> m["exact"]("Paris.", "paris", "Capital of France?")
    1.0
    >>> m["json_valid"]('```json\\n{"a": 1}\\n```', "", "")
    1.0
"""

from __future__ import annotations

import json
import math
import re
import string
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Metric = Callable[[str, str, str], float]

# Thousands separators only in groups of three, so "1,2,3" is three numbers and "1,234" is one;
# a sign counts only when it does not follow a word ("3-4" ends in 4, not -4).
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_TRAILING_PUNCT = ".!?,;:"
_FENCE = re.compile(r"\A```[\w+-]*[ \t]*\n?(.*?)\n?```\Z", re.DOTALL)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize(text: str | None) -> str:
    """Casefold, collapse whitespace and drop trailing punctuation.

    >>> normalize("  The  Answer is\\n42. ")
    'the answer is 42'
    """
    text = " ".join((text or "").casefold().split())
    return text.rstrip(_TRAILING_PUNCT + " ")


def last_number(text: str | None) -> float | None:
    """The last number written in `text`, or None.

    >>> last_number("1,234 apples and -3.50 pears")
    -3.5
    >>> last_number("1,234")
    1234.0
    >>> last_number("no digits") is None
    True
    """
    found = _NUMBER.findall(text or "")
    return float(found[-1].replace(",", "")) if found else None


def unwrap_fence(text: str) -> str:
    """The inside of a reply that is one fenced code block (```json ... ```), else the reply.

    >>> unwrap_fence('```json\\n{"a": 1}\\n```')
    '{"a": 1}'
    """
    text = text.strip()
    match = _FENCE.match(text)
    return match.group(1).strip() if match else text


def parse_json(text: str | None) -> tuple[bool, Any]:
    """(True, value) when the reply, or the one fenced block it consists of, is JSON.

    >>> parse_json('{"id": 7}')
    (True, {'id': 7})
    >>> parse_json("not json")
    (False, None)
    """
    try:
        return True, json.loads(unwrap_fence(text or ""))
    except ValueError:
        return False, None


def exact(generated: str, reference: str, prompt: str = "") -> float:
    """1.0 when reply and reference match, ignoring case, whitespace and trailing punctuation.

    >>> exact("Paris.", "paris", "")
    1.0
    >>> exact("Paris, France", "paris", "")
    0.0
    """
    return float(normalize(generated) == normalize(reference))


def contains(generated: str, reference: str, prompt: str = "") -> float:
    """1.0 when the normalized reference appears in the reply as whole words (not inside one).

    An empty reference never counts as contained.

    >>> contains("I think it is Lima.", "lima", "")
    1.0
    >>> contains("Limassol", "Lima", "")
    0.0
    """
    needle = normalize(reference)
    if not needle:
        return 0.0
    pattern = rf"(?<!\w){re.escape(needle)}(?!\w)"
    return float(re.search(pattern, normalize(generated)) is not None)


def _squad_tokens(text: str | None) -> list[str]:
    text = "".join(ch for ch in (text or "").lower() if ch not in string.punctuation)
    return _ARTICLES.sub(" ", text).split()


def token_f1(generated: str, reference: str, prompt: str = "") -> float:
    """SQuAD-style token F1: lowercase, drop punctuation and articles, then count overlap.

    >>> token_f1("the cat sat on the mat", "a cat sat on a mat", "")
    1.0
    >>> round(token_f1("a cat sat", "the cat sat on the mat", ""), 3)
    0.667
    """
    got, want = _squad_tokens(generated), _squad_tokens(reference)
    if not got or not want:
        return float(got == want)
    overlap = sum((Counter(got) & Counter(want)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(got), overlap / len(want)
    return 2 * precision * recall / (precision + recall)


def json_valid(generated: str, reference: str = "", prompt: str = "") -> float:
    """1.0 when the reply parses as JSON (one fenced code block is unwrapped first).

    >>> json_valid('```json\\n{"a": 1}\\n```', "", "")
    1.0
    >>> json_valid("{'a': 1}", "", "")
    0.0
    """
    return float(parse_json(generated)[0])


def numeric(generated: str, reference: str, prompt: str = "") -> float:
    """1.0 when the last number in the reply equals the last number in the reference.

    >>> numeric("So the total is 1,234.", "1234", "")
    1.0
    >>> numeric("-3.50", "the answer: -3.5", "")
    1.0
    >>> numeric("about 12", "13", "")
    0.0
    """
    got, want = last_number(generated), last_number(reference)
    if got is None or want is None:
        return 0.0
    return float(math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9))


def length_ratio(generated: str, reference: str, prompt: str = "") -> float:
    """Characters in the reply divided by characters in the reference (both stripped).

    NaN when the reference is empty, so an average over rows can skip it.

    >>> length_ratio("abcd", "ab", "")
    2.0
    >>> length_ratio("abc", "", "")
    nan
    """
    want = len((reference or "").strip())
    return len((generated or "").strip()) / want if want else math.nan


def metric_regex(pattern: str, ignore_case: bool = True) -> Metric:
    """A metric that is 1.0 when the reply matches `pattern` (re.search), for format checks.

    >>> starts_with_ticket = metric_regex(r"^T-\\d{4}")
    >>> starts_with_ticket("t-1234: refund issued", "", "")
    1.0
    >>> metric_regex(r"^T-\\d{4}", ignore_case=False)("t-1234", "", "")
    0.0
    """
    try:
        compiled = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as e:
        raise ValueError(f"metric_regex: pattern {pattern!r} is not a valid regex: {e}") from e

    def regex(generated: str, reference: str = "", prompt: str = "") -> float:
        return float(compiled.search(generated or "") is not None)

    regex.pattern = pattern  # type: ignore[attr-defined]  # shown by evaluate and code()
    regex.ignore_case = ignore_case  # type: ignore[attr-defined]  # evaluate searches elsewhere
    return regex


def metrics() -> dict[str, Metric]:
    """The built-in metrics by name: exact, contains, token_f1, json_valid, numeric, length_ratio.

    >>> sorted(metrics())
    ['contains', 'exact', 'json_valid', 'length_ratio', 'numeric', 'token_f1']
    """
    return {
        "exact": exact,
        "contains": contains,
        "token_f1": token_f1,
        "json_valid": json_valid,
        "numeric": numeric,
        "length_ratio": length_ratio,
    }


def _named(chosen: Mapping[str, Any] | Sequence[Any]) -> dict[str, Metric]:
    items = list(chosen.items()) if isinstance(chosen, Mapping) else [(None, m) for m in chosen]
    builtin, named = metrics(), {}
    key: str | None
    for key, metric in items:
        if isinstance(metric, str):
            if metric not in builtin:
                raise ValueError(
                    f"Unknown metric {metric!r}; use one of {', '.join(builtin)}, "
                    "metric_regex(...), or a function (generated, reference, prompt)."
                )
            key, metric = key or metric, builtin[metric]
        elif not callable(metric):
            raise ValueError(f"Metric {metric!r} is neither a metric name nor a function.")
        base = str(key or getattr(metric, "__name__", "metric"))
        name, n = base, 1
        while name in named:
            n += 1
            name = f"{base}_{n}"
        named[name] = metric
    return named


def apply_metrics(
    chosen: Mapping[str, Any] | Sequence[Any],
    generated: Sequence[str],
    references: Sequence[str | None] | None = None,
    prompts: Sequence[str | None] | None = None,
) -> dict[str, list[float]]:
    """Score every row with every metric: name -> one float per row.

    `chosen` holds metric names, metric functions or any callable (generated, reference, prompt)
    -> number, as a list or as a dict name -> metric. Names repeat as name_2, name_3.

    >>> apply_metrics(["exact", metric_regex("^T-")], ["T-1", "no"], ["t-1", "yes"])
    {'exact': [1.0, 0.0], 'regex': [1.0, 0.0]}
    """
    n = len(generated)
    references = [None] * n if references is None else references
    prompts = [None] * n if prompts is None else prompts
    for label, column in (("references", references), ("prompts", prompts)):
        if len(column) != n:
            raise ValueError(
                f"apply_metrics: {len(column)} {label} for {n} generated replies; "
                "pass one per reply."
            )
    out: dict[str, list[float]] = {}
    for name, metric in _named(chosen).items():
        out[name] = [
            _call(name, metric, i, generated[i], references[i], prompts[i]) for i in range(n)
        ]
    return out


def _call(name: str, metric: Any, row: int, gen: str, ref: str | None, prompt: str | None) -> float:
    try:
        value = metric(gen or "", ref or "", prompt or "")
        return float(value)
    except Exception as e:
        raise ValueError(f"Metric {name!r} failed on row {row}: {type(e).__name__}: {e}") from e
