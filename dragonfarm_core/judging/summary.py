"""A judgement's headline figures: the summary `judge()` writes into judge.json and the status.

    rubric_summary(scores)              # mean_score, its 95 % normal interval, the score counts
    pairwise_summary(verdicts, "base")  # wins/ties/losses, 95 % Wilson intervals, position bias
    wilson(7, 10)                       # [0.397..., 0.892...]

Both count what was not judged: unparsed judge answers (after one re-ask), judge failures, and
replies that were refusals, empty or errors (recorded, never scored).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dragonfarm_core.judging import judges as judging

Z95 = 1.959963984540054  # the normal quantile of a two-sided 95 % interval
INTERVAL = "wilson"


def wilson(k: int, n: int, z: float = Z95) -> list[float] | None:
    """The Wilson score interval of k successes in n (95 % by default); None when n is 0."""
    if n <= 0:
        return None
    p = k / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return [max(0.0, centre - half), min(1.0, centre + half)]


def _share(k: int, n: int) -> float | None:
    return k / n if n else None


def _reply_failures(failures: Sequence[str | None]) -> dict[str, int]:
    """How many replies were refusals, empty or errors (never judged)."""
    kinds = Counter((f or "").split(":")[0] for f in failures)
    return {k: kinds.get(k, 0) for k in ("refusal", "empty", "error")}


def rubric_summary(scores: list[judging.Score]) -> dict[str, Any]:
    values = [s.score for s in scores if s.score is not None]
    k = len(values)
    mean = sum(values) / k if k else None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (k - 1)) if mean is not None and k > 1 else None  # fmt: skip
    interval = None
    if mean is not None and sd is not None:
        half = Z95 * sd / math.sqrt(k)
        interval = [max(1.0, mean - half), min(10.0, mean + half)]
    failures = [s.failure for s in scores]
    summary = {
        "mode": "rubric",
        "n": len(scores),
        "scored": k,
        "mean_score": mean,
        "score_sd": sd,
        "mean_score_ci95": interval,
        "interval": "normal",
        "unparsed": sum(f == "unparsed" for f in failures),
        "judge_failed": sum(bool(f and f.startswith("judge ")) for f in failures),
        "replies_not_judged": _reply_failures([f for f in failures if f and _is_reply(f)]),
        "scores": {str(v): values.count(v) for v in sorted(set(values))},
    }
    summary["label"] = (
        f"score {mean:.1f}/10 (n={k})" if mean is not None else f"no scores (n={len(scores)})"
    )
    return summary


def _is_reply(failure: str) -> bool:
    return failure in ("refusal", "empty") or failure.startswith("error:")


def pairwise_summary(verdicts: list[judging.Verdict], against: str) -> dict[str, Any]:
    outcomes = Counter(v.outcome for v in verdicts if v.outcome)
    judged = sum(outcomes.values())
    wins, ties, losses = outcomes["win"], outcomes["tie"], outcomes["loss"]
    picks = [p for v in verdicts for p in v.picks if p in ("A", "B")]
    answer_failures = [f for v in verdicts for f in v.answer_failures if f]
    not_judged = [v.failure.split(": ", 1)[1] for v in verdicts if v.outcome is None and v.failure
                  and v.failure.startswith(("ours: ", "theirs: "))]  # fmt: skip
    summary = {
        "mode": "pairwise",
        "against": against,
        "n": len(verdicts),
        "judged": judged,
        "wins": wins,
        "ties": ties,
        "losses": losses,
        "win_rate": _share(wins, judged),
        "tie_rate": _share(ties, judged),
        "loss_rate": _share(losses, judged),
        "win_rate_ci95": wilson(wins, judged),
        "tie_rate_ci95": wilson(ties, judged),
        "loss_rate_ci95": wilson(losses, judged),
        "interval": INTERVAL,
        # Of the judge's answers that picked a side, the share that picked the one shown
        # first: 0.5 is no bias, 1.0 a judge that always takes the first.
        "position_bias": _share(picks.count("A"), len(picks)),
        "position_bias_n": len(picks),
        "unparsed": answer_failures.count("unparsed"),
        "judge_failed": sum(f.startswith("judge ") for f in answer_failures),
        "replies_not_judged": _reply_failures(not_judged),
    }
    summary["label"] = f"vs {against}: {wins}W {ties}T {losses}L (n={judged})"
    return summary


def judge_label(description: dict[str, Any]) -> str:
    """A judge's description as the short name the summary shows ("anthropic:claude-...")."""
    model = str(description.get("model") or "")
    provider = description.get("provider")
    if provider == "local":
        model = Path(model).name or model
    return f"{provider}:{model}" if provider else model
