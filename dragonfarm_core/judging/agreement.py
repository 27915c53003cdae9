"""`judge_agreement()`: does the judge agree with you? A judge checked against your Chat feedback.

    a = dragon.judge_agreement(dragon.judge_anthropic())       # every verdict in feedback/
    a = dragon.judge_agreement(judge, run="sft-0412", n=50)    # one run's replies, 50 cases
    a.accuracy, a.kappa, a.summary["kappa_ci95"], a.warning    # figures; None when trustworthy
    a.disagreements                                            # side by side, one row a case
    dragon.last_agreement(judge)                               # the latest measured, no calls

The person's verdicts come from the feedback store (`feedback_cases`): an edit (the edited
reply over the original) or a liked and a disliked reply to the same conversation is a pair,
which the judge compares twice with the replies swapped (`compare_replies`: both orders agree
or it is a tie); any other rated reply is scored 1-10 (`score_replies`), and a score of
`threshold` or more counts as liked. Agreement: accuracy (with a 95 % Wilson interval), Cohen's
kappa (with an analytic 95 % interval, `kappa`), position bias (of the judge's answers that
picked a side, the share that picked the reply shown first) and the flip rate (the pairs whose
verdict changed with the swap). A tie and an unusable answer never count as agreeing.

The result is kept in `<runs_dir>/llm_cache/agreement/<key>.json`, the key a hash of the judge
(as described, without secrets), the cases' texts, the rubric and the threshold: the same
question asked again is answered from there without asking the judge (`cache=False` asks
again). The app reads the latest one per judge from the same folder to show beside a judge.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dragonfarm_core.judging import judges as judging
from dragonfarm_core.judging.feedback_cases import Case, feedback_cases
from dragonfarm_core.judging.kappa import INTERVAL, cohen_kappa
from dragonfarm_core.judging.summary import judge_label, wilson
from dragonfarm_core.rundir import files, location

SCHEMA = 1
FOLDER = "agreement"  # under <runs_dir>/llm_cache/
MIN_KAPPA = 0.6  # below this, agreement is "low" (Landis & Koch: moderate or worse)
MIN_CASES = 20  # fewer judged cases than this: too few to trust the figures
DEFAULT_THRESHOLD = 6.0
BOOKKEEPING = ("max_active", "cache", "api_key_env")


@dataclass(frozen=True, eq=False)
class Agreement:
    """What `judge_agreement()` returns: the judge, the figures, and one row per case."""

    judge: dict[str, Any]
    summary: dict[str, Any]
    cases: pd.DataFrame
    settings: dict[str, Any] = field(default_factory=dict)
    cached: bool = False
    """Read from the agreement cache: the judge was not asked."""

    @property
    def accuracy(self) -> float | None:
        return self.summary.get("accuracy")

    @property
    def kappa(self) -> float | None:
        return self.summary.get("kappa")

    @property
    def warning(self) -> str | None:
        """A plain sentence when the agreement is low or measured on too few cases; else None."""
        return self.summary.get("warning")

    @property
    def disagreements(self) -> pd.DataFrame:
        """The judged cases where the judge and the person differ, side by side."""
        rows = self.cases[self.cases["agree"].eq(False)]
        return rows[["prompt", "reply_a", "reply_b", "human", "verdict", "rationale"]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "judge": self.judge,
            "settings": self.settings,
            "summary": self.summary,
            "cases": _records(self.cases),
        }

    def __repr__(self) -> str:
        s = self.summary
        lines = [f"<Agreement of {s.get('judge')} with your feedback: {s.get('label')}>"]
        lines.append(f"  position bias {_num(s.get('position_bias'))} "
                     f"(n={s.get('position_bias_n', 0)}), flip rate {_num(s.get('flip_rate'))}; "
                     f"{len(self.disagreements)} disagreements (.disagreements)")  # fmt: skip
        if self.warning:
            lines.append(f"  warning: {self.warning}")
        return "\n".join(lines)


def _num(value: Any) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [
        {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
        for r in frame.astype(object).to_dict(orient="records")
    ]


# -- asking the judge ------------------------------------------------------------------------


def _ask(fn: judging.Judge, cases: list[Case], rubric: str | None,
         threshold: float) -> list[dict[str, Any]]:  # fmt: skip
    """One row per case, in order: the judge's verdict and why."""
    rows: dict[int, dict[str, Any]] = {}
    groups: dict[tuple[str, str | None], list[int]] = {}
    for i, c in enumerate(cases):
        groups.setdefault((c.mode, c.system), []).append(i)
    for (mode, system), indexes in groups.items():
        chosen = [cases[i] for i in indexes]
        prompts = [c.prompt for c in chosen]
        if mode == "pairwise":
            verdicts = judging.compare_replies(fn, prompts, [c.reply_a for c in chosen],
                                               [c.reply_b for c in chosen], rubric=rubric,
                                               system=system)  # fmt: skip
            for i, v in zip(indexes, verdicts, strict=True):
                rows[i] = _pair_row(v)
        else:
            scores = judging.score_replies(fn, prompts, [c.reply_a for c in chosen],
                                           rubric=rubric, system=system)  # fmt: skip
            for i, s in zip(indexes, scores, strict=True):
                verdict = None if s.score is None else "liked" if s.score >= threshold else "disliked"  # fmt: skip
                rows[i] = {"verdict": verdict, "score": s.score, "picks": None,
                           "rationale": s.rationale, "failure": s.failure}  # fmt: skip
    return [rows[i] for i in range(len(cases))]


def _pair_row(v: judging.Verdict) -> dict[str, Any]:
    verdict = {"win": "A", "loss": "B", "tie": "tie"}.get(v.outcome or "")
    a_first, b_first = v.rationales
    rationale = f"A shown first: {a_first} | B shown first: {b_first}" if v.outcome else ""
    return {"verdict": verdict, "score": None, "picks": list(v.picks),
            "rationale": rationale, "failure": v.failure}  # fmt: skip


# -- the figures -----------------------------------------------------------------------------


def _summary(frame: pd.DataFrame, label: str, threshold: float, rubric: str | None) -> dict:
    judged = frame[frame["verdict"].notna()]
    n = len(judged)
    agree = int(judged["agree"].sum()) if n else 0
    k = cohen_kappa(zip(judged["human"], judged["verdict"], strict=True))
    pairs = judged[judged["mode"] == "pairwise"]
    singles = judged[judged["mode"] == "rubric"]
    picks = [p for row in pairs["picks"] for p in row if p in ("A", "B")]
    flips = sum(1 for row in pairs["picks"] if row[0] in ("A", "B") and row[0] == row[1])
    summary: dict[str, Any] = {
        "n": len(frame),
        "judged": n,
        "not_judged": len(frame) - n,
        "pairwise_n": len(pairs),
        "rubric_n": len(singles),
        "agree": agree,
        "accuracy": agree / n if n else None,
        "accuracy_ci95": wilson(agree, n),
        "pairwise_accuracy": float(pairs["agree"].mean()) if len(pairs) else None,
        "rubric_accuracy": float(singles["agree"].mean()) if len(singles) else None,
        "kappa": k.kappa,
        "kappa_se": k.se,
        "kappa_ci95": list(k.ci95) if k.ci95 else None,
        "kappa_interval": INTERVAL,
        "chance_agreement": k.expected,
        "accuracy_interval": "wilson, 95 %",
        # Of the judge's pairwise answers that picked a side, the share that picked the reply
        # shown first: 0.5 is none, 1.0 a judge that always takes the first.
        "position_bias": picks.count("A") / len(picks) if picks else None,
        "position_bias_n": len(picks),
        # The pairs whose verdict followed the position: the same side picked in both orders.
        "flips": flips,
        "flip_rate": flips / len(pairs) if len(pairs) else None,
        "threshold": threshold,
        "rubric": rubric,
        "judge": label,
        "measured_at": files.now_iso(),
    }
    summary["warning"] = _warning(n, k.kappa)
    kappa = "n/a" if k.kappa is None else f"{k.kappa:.2f}"
    accuracy = "n/a" if not n else f"{agree / n:.0%}"
    summary["label"] = f"accuracy {accuracy}, kappa {kappa} (n={n})"
    return summary


def _warning(n: int, kappa: float | None) -> str | None:
    parts = []
    if n and kappa is None:
        parts.append(
            "Kappa is undefined: you and the judge gave every case the same verdict, so "
            "agreement cannot be told from chance. Rate replies you dislike as well as ones you "
            "like, then measure again."
        )
    elif kappa is not None and kappa < MIN_KAPPA:
        parts.append(
            f"Low agreement: kappa is {kappa:.2f} (below {MIN_KAPPA}), so this judge often "
            "decides differently from you. Read the disagreements before letting it gate data."
        )
    if n < MIN_CASES:
        parts.append(
            f"Measured on {n} case{'s' if n != 1 else ''}, fewer than {MIN_CASES}: too few to "
            "trust. Rate more replies in Chat (thumbs up or down, or edit one) and measure again."
        )
    return " ".join(parts) or None


def _frame(cases: list[Case], answers: list[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for c, a in zip(cases, answers, strict=True):
        agree = None if a["verdict"] is None else a["verdict"] == c.human
        rows.append({"id": c.id, "mode": c.mode, "source": c.source, "run": c.run,
                     "prompt": c.prompt, "system": c.system, "reply_a": c.reply_a,
                     "reply_b": c.reply_b, "human": c.human, **a, "agree": agree})  # fmt: skip
    return pd.DataFrame(rows).astype(object)


# -- the cache -------------------------------------------------------------------------------


def _folder(runs_dir: str | os.PathLike[str] | None) -> Path:
    return location.runs_dir(runs_dir) / files.LLM_CACHE_DIR / FOLDER


def _key(description: dict[str, Any], cases: list[Case], rubric: str | None,
         threshold: float) -> str:  # fmt: skip
    identity = {k: v for k, v in description.items() if k not in BOOKKEEPING}
    blob = json.dumps({"v": SCHEMA, "judge": identity, "cases": [c.id for c in cases],
                       "rubric": rubric, "threshold": threshold},
                      sort_keys=True, ensure_ascii=False, default=str)  # fmt: skip
    return hashlib.sha256(blob.encode()).hexdigest()


def _load(stored: Any, cached: bool) -> Agreement | None:
    if not isinstance(stored, dict) or stored.get("schema") != SCHEMA:
        return None
    frame = pd.DataFrame(stored.get("cases") or []).astype(object)
    return Agreement(dict(stored.get("judge") or {}), dict(stored.get("summary") or {}), frame,
                     dict(stored.get("settings") or {}), cached)  # fmt: skip


def last_agreement(judge: Any, runs_dir: str | os.PathLike[str] | None = None) -> Agreement | None:
    """The latest agreement measured for `judge` in this runs dir, from the cache: no judge is
    asked. judge: a judge as `judge_agreement` takes it, its label ("provider:model", as
    `summary["judge"]` shows it), or a description ({"provider": ..., "model": ...}). None
    when it was never measured."""
    if isinstance(judge, dict):
        label = judge_label(judge)
    elif isinstance(judge, str) and ":" in judge:
        label = judge
    else:
        label = judge_label(judging.describe_judge(judging.as_judge(judge, runs_dir)))
    latest: Agreement | None = None
    for path in sorted(_folder(runs_dir).glob("*.json")):
        found = _load(files.read_record(path), cached=True)
        if found is None or found.summary.get("judge") != label:
            continue
        if latest is None or str(found.summary.get("measured_at")) > str(
            latest.summary.get("measured_at")
        ):
            latest = found
    return latest


# -- judge_agreement -------------------------------------------------------------------------


def _cases_to_measure(runs_dir: Any, run: Any, n: int | None, seed: int) -> list[Case]:
    run_id = getattr(run, "id", run)
    if run_id is not None and not isinstance(run_id, str):
        raise TypeError(f"run must be a run or a run id; got {type(run).__name__}.")
    cases, damaged = feedback_cases(runs_dir, run_id)
    if damaged:
        from dragonfarm_core.conversation.feedback_store import damage_note

        warnings.warn(damage_note(damaged, runs_dir), stacklevel=3)
    if not cases:
        where = location.runs_dir(runs_dir) / files.FEEDBACK_DIR
        whose = f" for run {run_id}" if run_id else ""
        raise ValueError(
            f"No feedback{whose} to measure the judge against (in {where}). Rate replies in "
            "the app's Chat tab (thumbs up or down, or edit a reply into the one you wanted); "
            "20 or more, ideally with a liked and a disliked reply to the same message, then "
            "measure again."
        )
    if n is None:
        return cases
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n = {n!r}; use a whole number of cases, 1 or more (None for all).")
    if n >= len(cases):
        return cases
    return [cases[i] for i in sorted(random.Random(seed).sample(range(len(cases)), n))]


def judge_agreement(
    judge: Any = None,
    runs_dir: str | os.PathLike[str] | None = None,
    run: Any = None,
    n: int | None = None,
    rubric: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    seed: int = 42,
    cache: bool = True,
) -> Agreement:
    """How often `judge` decides as you did in Chat: accuracy, Cohen's kappa (95 % interval),
    position bias, and the disagreements.

    judge: an LLM (dragon.judge_anthropic(), ...), a run or model id for a local judge, or a
    function from prompts to answers (None: Claude when ANTHROPIC_API_KEY is set). runs_dir:
    whose feedback/ (None: the session's). run: only the feedback given on that run's replies.
    n: at most this many cases, chosen with `seed` (None: all). rubric: what the judge is told
    to look for. threshold: a rubric score at or above it counts as the judge liking a reply.
    cache: False asks the judge again even when this exact question was measured before.

    Raises ValueError when there is no feedback to measure against. Warns (and sets
    `.warning`) when kappa is below 0.6 or fewer than 20 cases were judged.
    """
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 1 <= threshold <= 10:  # fmt: skip
        raise ValueError(f"threshold = {threshold!r}; use a score from 1 to 10 (default 6).")
    threshold = float(threshold)
    cases = _cases_to_measure(runs_dir, run, n, seed)
    fn = judging.as_judge(judge, runs_dir)
    description = judging.describe_judge(fn)
    path = _folder(runs_dir) / f"{_key(description, cases, rubric, threshold)}.json"
    found = _load(files.read_record(path), cached=True) if cache else None
    if found is None:
        frame = _frame(cases, _ask(fn, cases, rubric, threshold))
        summary = _summary(frame, judge_label(description), threshold, rubric)
        settings = {"run": getattr(run, "id", run), "n": n, "seed": seed, "rubric": rubric,
                    "threshold": threshold}  # fmt: skip
        found = Agreement(description, summary, frame, settings)
        path.parent.mkdir(parents=True, exist_ok=True)
        files.write_json(path, found.to_dict())
    if found.warning:
        warnings.warn(found.warning, UserWarning, stacklevel=2)
    return found
