"""Score completions with a list of rewards, the way the GRPO trainer needs it.

    errors = RewardErrors()
    scores = score(rewards, prompts, completions, references, rows, errors)
    errors.check()                       # raises RewardError past the error-rate limit
    scores.total, scores.per_reward["numeric"]

A reward that raises, or returns NaN or something that is not a number, scores 0 for that
completion and is counted, so one odd completion cannot stop a run; a reward that keeps failing
(by default more than 20% of at least 20 calls) stops it with the first traceback, which is the
one that explains the problem. Built-in and command rewards are clipped to [0, 1]; custom
rewards keep any finite number they return.

A regex reward searches in the reward helper (`runner.search`), never in this process, and
gives up after REGEX_TIMEOUT_S on one completion: a pattern that backtracks without end would
otherwise hold the app, or the trainer and the device queue behind it. Such a completion fails
like any other (RewardTimeout: it scores 0 and is counted), so in training a pattern that
times out often stops the run with that message; the dry run (`raise_timeouts=True`) refuses
the pattern at its first timeout.
"""

from __future__ import annotations

import math
import numbers
import os
import traceback
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from dragonfarm_core.rewards import builtin, command, custom, runner
from dragonfarm_core.rewards.custom_run import CUSTOM_TIMEOUT_S
from dragonfarm_core.rewards.errors import RewardError, RewardTimeout
from dragonfarm_core.rewards.spec import Reward, reward_names

# Far above what any sane pattern takes on one completion (microseconds on a few KB), far below
# what a person waits for: a search that takes longer backtracks catastrophically.
REGEX_TIMEOUT_S = 1.0


def completion_text(completion: Any) -> str:
    """The text of a completion: a str, or (TRL's conversational form) a list of messages, of
    which the last one's content is the completion.

    >>> completion_text([{"role": "assistant", "content": "42"}])
    '42'
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content") or "")
    raise TypeError(f"A completion must be a str or a list of messages, got {type(completion)}.")


def score_one(
    reward: Reward, prompt: Any, completion: str, reference: str | None, row: Any
) -> float:
    """One reward on one completion. Raises on failure; `score` turns failures into counted 0s."""
    if reward.needs_reference and reference is None:
        raise RewardError(
            f"Reward {reward.label!r} compares with the reference, but this row "
            "has none; map a reference column with map_prompts(reference=...)."
        )
    text = completion_text(completion)
    if reward.type == "custom":
        value = custom.load_function(str(reward.file), reward.fn)(prompt, text, reference, row)
    elif reward.type == "command":
        result = command.run_command(reward.command or (), text, reward.input, reward.timeout)
        value = command.command_score(result, reward.score_from, reward.min_score, reward.max_score)
    elif reward.type == "regex":
        value, error = _regex_results(reward, [text], raise_timeouts=True)[0]
        if error is not None:
            raise error
    else:
        value = _builtin(reward, text, reference or "")
    if not isinstance(value, numbers.Real):  # bool counts: True is 1
        raise RewardError(
            f"Reward {reward.label!r} returned {value!r} ({type(value).__name__});"
            " a reward must return a number."
        )
    value = float(value)
    if not math.isfinite(value):
        raise RewardError(f"Reward {reward.label!r} returned {value}; a reward must be finite.")
    return value if reward.type == "custom" else min(1.0, max(0.0, value))


Result = tuple[float, Exception | None]


def _regex_results(
    reward: Reward, completions: Sequence[Any], raise_timeouts: bool
) -> list[Result]:
    """The regex reward on each completion: one helper request searches them all (one fork,
    not one per completion), each given REGEX_TIMEOUT_S; after a timeout, the rest go again."""
    results: list[Result] = [(0.0, None)] * len(completions)
    texts: dict[int, str] = {}
    for i, completion in enumerate(completions):
        try:
            texts[i] = completion_text(completion)
        except TypeError as e:
            results[i] = (0.0, e)
    todo = list(texts)
    while todo:
        try:
            found = runner.search(str(reward.pattern), reward.case_sensitive,
                                  [texts[i] for i in todo], REGEX_TIMEOUT_S)  # fmt: skip
        except RewardError as e:  # the helper failed: the searches not done fail with it
            for i in todo:
                results[i] = (0.0, e)
            break
        for i, hit in zip(todo, found, strict=False):
            if hit is None:
                timeout = _timed_out(reward, texts[i])
                if raise_timeouts:
                    raise timeout
                results[i] = (0.0, timeout)
            else:
                results[i] = (float(hit), None)
        todo = todo[len(found) :]
    return results


def _custom_results(
    reward: Reward, prompts: Sequence[Any], completions: Sequence[Any],
    references: Sequence[str | None], rows: Sequence[Any],
) -> list[Result]:  # fmt: skip
    """The dry run's custom reward: its function called in the reward helper (`custom_run`),
    not in this process (the app), each completion given CUSTOM_TIMEOUT_S; a completion past it
    raises RewardTimeout."""
    results: list[Result] = [(0.0, None)] * len(completions)
    items, places = [], []
    for i, completion in enumerate(completions):
        try:
            items.append([prompts[i], completion_text(completion), references[i], rows[i]])
            places.append(i)
        except TypeError as e:
            results[i] = (0.0, e)
    answers = runner.custom(str(reward.file), reward.fn, items, CUSTOM_TIMEOUT_S)
    if answers[0] is None or "error" in answers[0]:  # the file changed since it was checked
        raise RewardError(f"Reward {reward.label!r} could not be imported: "
                          f"{'it timed out' if answers[0] is None else answers[0]['error']}")  # fmt: skip
    for i, item, answer in zip(places, items, answers[1:], strict=False):
        if answer is None:
            raise RewardTimeout(
                f"Reward {reward.label!r} gave up after {CUSTOM_TIMEOUT_S:g} s on one completion "
                f"({len(item[1])} characters): its function {reward.fn}() in {reward.file} did "
                "not return. Look for a loop that never ends, or a slow call per completion."
            )
        results[i] = _custom_value(reward, answer)
    return results


def _custom_value(reward: Reward, answer: dict[str, Any]) -> Result:
    """One answer of the helper's custom reward as score_one would have scored it."""
    if "error" in answer:
        return 0.0, RewardError(answer["error"], traceback=answer.get("traceback"))
    if "not_number" in answer:
        return 0.0, RewardError(
            f"Reward {reward.label!r} returned {answer['not_number']} ({answer['type']}); a "
            "reward must return a number."
        )
    value = answer["value"]
    if isinstance(value, str):  # nan, inf
        return 0.0, RewardError(
            f"Reward {reward.label!r} returned {value}; a reward must be finite."
        )
    return float(value), None


def _timed_out(reward: Reward, text: str) -> RewardTimeout:
    return RewardTimeout(
        f"Reward {reward.label!r} gave up after {REGEX_TIMEOUT_S:g} s on one completion "
        f"({len(text)} characters): its pattern {reward.pattern!r} backtracks too much "
        "(nested repeats such as (.+)+ can take exponential time). Simplify the pattern, "
        "e.g. one repeat per part and anchors."
    )


def _builtin(reward: Reward, text: str, reference: str) -> float:
    if reward.type == "exact":
        return builtin.exact(text, reference)
    if reward.type == "contains":
        return builtin.contains(text, reference)
    if reward.type == "numeric":
        return builtin.numeric(text, reference)
    if reward.type == "json":
        return builtin.json_score(text, reward.keys)
    if reward.type == "length":
        return builtin.length_score(text, reward.min_chars, reward.max_chars)
    if reward.type == "keyword":
        return builtin.keyword_score(text, reward.words or (), reward.mode, reward.case_sensitive)
    raise RewardError(f"Reward.type {reward.type!r} has no scorer.")


@dataclass
class _Tally:
    calls: int = 0
    errors: int = 0
    first_error: str | None = None  # its type and message, for the one line a status shows
    first_traceback: str | None = None


@dataclass
class RewardErrors:
    """Counts calls and failures per reward across a whole run; `check()` enforces the limit."""

    max_rate: float = 0.2
    min_calls: int = 20
    tallies: dict[str, _Tally] = field(default_factory=dict)

    def record(self, name: str, error: BaseException | None = None) -> None:
        tally = self.tallies.setdefault(name, _Tally())
        tally.calls += 1
        if error is not None:
            tally.errors += 1
            if tally.first_traceback is None:
                tally.first_error = f"{type(error).__name__}: {error}".splitlines()[0]
                # a custom reward's failure in the helper comes with the traceback it had there
                tally.first_traceback = getattr(error, "traceback", None) or "".join(
                    traceback.format_exception(error)
                )

    def counts(self) -> dict[str, tuple[int, int]]:
        """name -> (calls, errors)."""
        return {name: (t.calls, t.errors) for name, t in self.tallies.items()}

    def check(self) -> None:
        """Raise RewardError, carrying the first traceback, for a reward past the limit."""
        for name, t in self.tallies.items():
            if t.calls >= self.min_calls and t.errors > self.max_rate * t.calls:
                raise RewardError(
                    f"Reward {name!r} failed on {t.errors} of {t.calls} completions (more than "
                    f"{self.max_rate:.0%}), first with {t.first_error}\nThe first failure "
                    f"was:\n{t.first_traceback}",
                    traceback=t.first_traceback,
                )


@dataclass(frozen=True)
class Scores:
    """Per-reward scores (name -> one per completion) and the weighted total per completion."""

    per_reward: dict[str, list[float]]
    total: list[float]


def score(
    rewards: Sequence[Reward],
    prompts: Sequence[Any],
    completions: Sequence[Any],
    references: Sequence[str | None] | None = None,
    rows: Sequence[Any] | None = None,
    errors: RewardErrors | None = None,
    raise_timeouts: bool = False,
) -> Scores:
    """Score each completion with each reward; failures score 0 and are counted in `errors`.

    raise_timeouts: a regex that runs out of time on a completion raises RewardTimeout at once
    instead (the dry run: it refuses the pattern rather than wait on every completion), and a
    custom reward's function runs in the reward helper with CUSTOM_TIMEOUT_S per completion, past
    which it raises RewardTimeout too (the dry run runs in the app, which must not run it).

    >>> from dragonfarm_core.rewards.spec import reward
    >>> s = score([reward("numeric"), reward("length", max_chars=4, weight=0.5)],
    ...           ["2+2?", "2+3?"], ["4", "it is 6"], ["4", "5"])
    >>> s.per_reward, s.total
    ({'numeric': [1.0, 0.0], 'length': [1.0, 0.25]}, [1.5, 0.125])
    """
    n = len(completions)
    references = [None] * n if references is None else references
    rows = [None] * n if rows is None else rows
    for label, column in (("prompts", prompts), ("references", references), ("rows", rows)):
        if len(column) != n:
            raise ValueError(f"score: {len(column)} {label} for {n} completions; pass one each.")
    errors = RewardErrors() if errors is None else errors
    names = reward_names(list(rewards))
    per_reward: dict[str, list[float]] = {}
    for r, name in zip(rewards, names, strict=True):

        def attempt(i: int, r: Reward = r) -> Result:
            try:
                return score_one(r, prompts[i], completions[i], references[i], rows[i]), None
            except Exception as e:
                return 0.0, e

        if r.type == "regex":
            results = _regex_results(r, completions, raise_timeouts)
        elif r.type == "custom" and raise_timeouts:  # the dry run, in the app: out of process
            results = _custom_results(r, prompts, completions, references, rows)
        elif r.type == "command" and n > 1:  # programs wait on I/O: run a few side by side
            with ThreadPoolExecutor(max_workers=min(n, os.cpu_count() or 1, 8)) as pool:
                results = list(pool.map(attempt, range(n)))
        else:
            results = [attempt(i) for i in range(n)]
        for _, error in results:  # counted here, in one thread
            errors.record(name, error)
        per_reward[name] = [value for value, _ in results]
    total = [
        sum(r.weight * per_reward[name][i] for r, name in zip(rewards, names, strict=True))
        for i in range(n)
    ]
    return Scores(per_reward, total)
