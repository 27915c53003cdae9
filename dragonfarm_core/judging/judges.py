"""Judging replies with a language model: rubric scores, pairwise verdicts with position swap.

    scores = score_replies(judge, prompts, replies, rubric="Concrete next steps.")
    scores[0].score, scores[0].rationale, scores[0].failure      # 8.0, "...", None
    verdicts = compare_replies(judge, prompts, ours, theirs)      # each asked twice, swapped

A judge is anything `as_judge` accepts: an `LLM` (best: a `judge_*` one), a run / model id /
folder (a local judge through the inference backend), or a plain Python callable from a list of
prompts to a list of answers (str, `Reply` or an already parsed dict). Its answers are JSON:
`{"score": 1-10, "rationale": ...}` or `{"winner": "A"|"B"|"tie", "rationale": ...}`. An answer
that is not usable is asked again once, then counted as unparsed: never guessed. A reply that is
a refusal, empty or an error is recorded as such and never sent to the judge, so it is never
scored as if the model had answered.

`judge()` (judging a run against a rubric or another model, judge.json, the run's status) is
built on these two; `synthesis` uses `score_replies` for its judge gate and its pairs. The
questions and the reading of the answers are `judge_questions`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dragonfarm_core.judging.questions import (
    REASK,
    pair_prompt,
    read_pick,
    read_score,
    score_prompt,
)
from dragonfarm_core.llm import LLM, Reply, judge_anthropic, judge_local
from dragonfarm_core.llm.providers import ANTHROPIC_KEY_ENV

# A judge is asked in batches of this many prompts, so progress shows and a cancel lands
# between batches; an LLM still runs up to its max_active of a batch at once.
BATCH = 16

Judge = Callable[[list[str]], Sequence[Any]]
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Score:
    """A judge's rubric score for one reply."""

    score: float | None
    """1-10; None when the reply was not scored (see `failure`)."""
    rationale: str
    failure: str | None = None
    """Why not scored: the reply was a "refusal", "empty" or "error: ..." (never sent to the
    judge); the judge's answer was "unparsed" twice; or the judge itself gave a "judge
    refusal", "judge empty" or "judge error: ..."."""

    @property
    def ok(self) -> bool:
        return self.failure is None


@dataclass(frozen=True)
class Verdict:
    """A pairwise verdict for one prompt, from two judge answers with the replies swapped."""

    outcome: str | None
    """"win" / "loss" (for the first reply set) when both orders agree, "tie" when they
    disagree or the judge called a tie; None when not judged (see `failure`)."""
    picks: tuple[str | None, str | None]
    """What the judge picked, as positions "A" / "B" / "tie": with ours shown first, then with
    ours shown second (None where that answer was not usable)."""
    rationales: tuple[str, str]
    failure: str | None = None
    answer_failures: tuple[str | None, str | None] = (None, None)
    """Why each of the two judge answers was unusable ("unparsed", "judge refusal", ...)."""


# -- coercing a judge ----------------------------------------------------------------------------


def as_judge(judge: Any, runs_dir: str | os.PathLike[str] | None = None) -> Judge:
    """A callable from prompts to answers, from what a person passed as `judge=`.

    None: Claude through `judge_anthropic()` when ANTHROPIC_API_KEY is set (the manual's
    default), else a ValueError naming the choices. An `LLM` is used as it is; a `Run`, a path,
    a run id, a model id or a model folder becomes `judge_local(...)` (greedy, JSON-only); any
    other callable is called with a list of prompts and must return one answer per prompt.
    runs_dir: where run ids are found and an LLM keeps its response cache (None: the
    session's runs dir).
    """
    made = _as_judge(judge, runs_dir)
    return made.caching_in(runs_dir) if isinstance(made, LLM) else made


def _as_judge(judge: Any, runs_dir: str | os.PathLike[str] | None) -> Judge:
    if judge is None:
        if os.environ.get(ANTHROPIC_KEY_ENV, "").strip():
            return judge_anthropic()
        raise ValueError(
            f"No judge: pass judge= (dragon.judge_anthropic(), dragon.judge_openai(model, url), "
            f"a run or model id for a local judge, or a function prompts -> answers), or set "
            f"{ANTHROPIC_KEY_ENV} to use Claude."
        )
    if isinstance(judge, LLM):
        return judge
    if isinstance(judge, str | os.PathLike) or hasattr(judge, "dir"):
        if isinstance(judge, str) and not judge.strip():
            raise ValueError("judge = '': name a run, a model id or a model folder.")
        return judge_local(local_model(judge, runs_dir))
    if callable(judge):
        return judge
    raise TypeError(
        f"judge must be an LLM (dragon.judge_anthropic(), ...), a run, a model id or folder, "
        f"or a function from a list of prompts to a list of answers; got {type(judge).__name__}."
    )


def local_model(x: Any, runs_dir: str | os.PathLike[str] | None = None) -> Any:
    """A run id in the runs directory as its Run; anything else (a Run, a run folder, a model
    id, a model folder) as it is, for the inference backend to resolve."""
    if isinstance(x, str) and Path(x).name == x and not Path(x).exists():
        from dragonfarm_core.rundir import files, location
        from dragonfarm_core.rundir.run import Run

        candidate = location.runs_dir(runs_dir) / x
        if files.is_run_dir(candidate):
            return Run(candidate)
    return x


def describe_judge(judge: Any) -> dict[str, Any]:
    """A JSON-ready description of a judge, without secrets (an LLM's `describe()`; a plain
    function by its name)."""
    if isinstance(judge, LLM):
        return judge.describe()
    name = getattr(judge, "__qualname__", None) or type(judge).__name__
    module = getattr(judge, "__module__", None)
    return {"provider": "function", "model": f"{module}.{name}" if module else name}


def reply_failure(reply: Any) -> str | None:
    """Why a reply cannot be judged: "refusal", "empty", "error: ..."; None when it can."""
    if isinstance(reply, Reply):
        if reply.refusal:
            return "refusal"
        if reply.error:
            return f"error: {reply.error}"
        if reply.empty or not reply.text.strip():
            return "empty"
        return None
    if reply is None or not str(reply).strip():
        return "empty"
    return None


# -- asking --------------------------------------------------------------------------------------


def _ask(
    judge: Judge, prompts: list[str], progress: Progress | None, done: int, total: int
) -> list:
    """The judge's answers to `prompts`, in batches, reporting progress after each."""
    answers: list[Any] = []
    for start in range(0, len(prompts), BATCH):
        batch = prompts[start : start + BATCH]
        got = list(judge(batch))
        if len(got) != len(batch):
            raise ValueError(
                f"The judge returned {len(got)} answers for {len(batch)} prompts; a judge must "
                "return one answer per prompt, in order."
            )
        answers.extend(got)
        if progress is not None:
            progress(done + len(answers), total)
    return answers


def _ask_reading(
    judge: Judge,
    prompts: list[str],
    read: Callable[[Any], tuple[Any, str, str | None]],
    progress: Progress | None,
    done: int = 0,
    total: int | None = None,
) -> list[tuple[Any, str, str | None]]:
    """Ask, read every answer with `read`, and ask once more where the answer was unusable
    ("unparsed" or empty): what comes back the second time is final."""
    total = len(prompts) if total is None else total
    results = [read(a) for a in _ask(judge, prompts, progress, done, total)]
    again = [i for i, r in enumerate(results) if r[2] in ("unparsed", "judge empty")]
    if again:
        second = _ask(judge, [prompts[i] + REASK for i in again], None, 0, len(again))
        for i, answer in zip(again, second, strict=True):
            results[i] = read(answer)
    return results


def _aligned(name: str, values: Sequence[Any] | None, n: int) -> list[Any]:
    if values is None:
        return [None] * n
    if isinstance(values, str) or len(values) != n:
        raise ValueError(f"{name} must be a list with one entry per prompt ({n}).")
    return list(values)


def _check_prompts(prompts: Sequence[str]) -> list[str]:
    if isinstance(prompts, str) or not all(isinstance(p, str) for p in prompts):
        raise TypeError("prompts must be a list of str.")
    return list(prompts)


def score_replies(
    judge: Any,
    prompts: Sequence[str],
    replies: Sequence[Any],
    *,
    rubric: str | None = None,
    references: Sequence[str | None] | None = None,
    system: str | None = None,
    progress: Progress | None = None,
) -> list[Score]:
    """One `Score` per reply, in order: the judge's 1-10 score and rationale.

    judge: anything `as_judge` takes. replies: str or `Reply` (a refusal, empty reply or error
    is recorded and never sent to the judge). references: a reference answer per prompt (or
    None), taken as ground truth. system: the system prompt the replies were generated under,
    shown to the judge. progress: called with (answered, total) after each batch; raise from it
    to stop. An unusable judge answer is asked again once, then the Score is "unparsed".
    """
    prompts = _check_prompts(prompts)
    replies = _aligned("replies", replies, len(prompts))
    refs = _aligned("references", references, len(prompts))
    fn = as_judge(judge)
    out: list[Score | None] = [None] * len(prompts)
    asked: list[int] = []
    for i, reply in enumerate(replies):
        failure = reply_failure(reply)
        if failure:
            out[i] = Score(None, "", failure)
        else:
            asked.append(i)
    questions = [score_prompt(prompts[i], str(replies[i]).strip(), rubric, refs[i], system)
                 for i in asked]  # fmt: skip
    for i, (value, rationale, failure) in zip(
        asked, _ask_reading(fn, questions, read_score, progress), strict=True
    ):
        out[i] = Score(value, rationale, failure)
    return [s for s in out if s is not None]


def compare_replies(
    judge: Any,
    prompts: Sequence[str],
    ours: Sequence[Any],
    theirs: Sequence[Any],
    *,
    rubric: str | None = None,
    references: Sequence[str | None] | None = None,
    system: str | None = None,
    progress: Progress | None = None,
) -> list[Verdict]:
    """One `Verdict` per prompt: `ours` against `theirs`, each question asked twice with the
    replies' positions swapped. Both answers prefer ours: "win"; both theirs: "loss"; a flip
    (or a tie called): "tie". A prompt where either reply was a refusal, empty or an error, or
    where a judge answer stayed unusable after one re-ask, is not judged (outcome None)."""
    prompts = _check_prompts(prompts)
    ours = _aligned("ours", ours, len(prompts))
    theirs = _aligned("theirs", theirs, len(prompts))
    refs = _aligned("references", references, len(prompts))
    fn = as_judge(judge)
    out: list[Verdict | None] = [None] * len(prompts)
    asked: list[int] = []
    for i in range(len(prompts)):
        ours_failed, theirs_failed = reply_failure(ours[i]), reply_failure(theirs[i])
        if ours_failed or theirs_failed:
            why = f"ours: {ours_failed}" if ours_failed else f"theirs: {theirs_failed}"
            out[i] = Verdict(None, (None, None), ("", ""), why)
        else:
            asked.append(i)
    questions = []
    for i in asked:
        a, b = str(ours[i]).strip(), str(theirs[i]).strip()
        questions.append(pair_prompt(prompts[i], a, b, rubric, refs[i], system))
        questions.append(pair_prompt(prompts[i], b, a, rubric, refs[i], system))
    answers = _ask_reading(fn, questions, read_pick, progress)
    for k, i in enumerate(asked):
        (first, why_first, fail_first), (second, why_second, fail_second) = answers[
            2 * k : 2 * k + 2
        ]
        rationales = (why_first, why_second)
        failure = fail_first or fail_second
        failures = (fail_first, fail_second)
        if failure:
            out[i] = Verdict(None, (first, second), rationales, failure, failures)
            continue
        out[i] = Verdict(_combine(first, second), (first, second), rationales)
    return [v for v in out if v is not None]


def _combine(first: str | None, second: str | None) -> str:
    """Ours was A in the first answer and B in the second: agreement wins or loses."""
    if first == "A" and second == "B":
        return "win"
    if first == "B" and second == "A":
        return "loss"
    return "tie"
