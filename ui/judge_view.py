"""Pure drawing for the Evaluate tab's Judge section: a judgement in, markdown, tables, figures out.

Like `present.py` and `charts.py`, nothing here calls the API or touches Gradio. Pairwise: the
win / tie / loss shares with their 95 % Wilson intervals as error bars, and the judge's
position bias; rubric: how many replies got each score, with the mean.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import plotly.graph_objects as go

WIN, TIE, LOSS = "#059669", "#9ca3af", "#dc2626"
SCORE_COLOUR = "#6366f1"
# The details columns shown, in order, with their headings.
PAIRWISE_COLUMNS = {
    "prompt": "prompt",
    "reply": "this run's reply",
    "against_reply": "the other reply",
    "outcome": "verdict",
    "pick_ours_first": "pick (this run shown first)",
    "pick_ours_second": "pick (this run shown second)",
    "rationale_ours_first": "rationale (first)",
    "rationale_ours_second": "rationale (second)",
    "failure": "not judged because",
}
RUBRIC_COLUMNS = {
    "prompt": "prompt",
    "reference": "reference",
    "reply": "this run's reply",
    "score": "score",
    "rationale": "rationale",
    "failure": "not scored because",
}


def _pct(value: Any) -> str:
    return "n/a" if not isinstance(value, int | float) else f"{value:.0%}"


def _interval(value: Any) -> str:
    if not isinstance(value, list | tuple) or len(value) != 2:
        return ""
    return f" (95 % CI {value[0]:.0%}–{value[1]:.0%})"


def _not_judged(summary: dict[str, Any]) -> str:
    replies = summary.get("replies_not_judged") or {}
    parts = [f"{k}: {v}" for k, v in replies.items() if v]
    extra = f" Replies not judged ({', '.join(parts)})." if parts else ""
    return (
        f"Judge answers that could not be parsed (after one re-ask): "
        f"{summary.get('unparsed', 0)}; refused or failed: {summary.get('judge_failed', 0)}."
        + extra
    )


def summary_markdown(run_id: str, mode: str, summary: dict[str, Any]) -> str:
    """The headline: what was judged, by whom, and the figures with their intervals."""
    judge = summary.get("judge") or "the judge"
    if mode == "pairwise":
        head = (
            f"**Run `{run_id}` against {summary.get('against')}**, judged by `{judge}` on "
            f"{summary.get('judged', 0)} of {summary.get('n', 0)} prompts: "
            f"**{summary.get('wins', 0)} wins, {summary.get('ties', 0)} ties, "
            f"{summary.get('losses', 0)} losses**. Win rate {_pct(summary.get('win_rate'))}"
            f"{_interval(summary.get('win_rate_ci95'))}, Wilson interval."
        )
    else:
        mean = summary.get("mean_score")
        shown = "n/a" if mean is None else f"{mean:.2f} / 10"
        ci = summary.get("mean_score_ci95")
        interval = f" (95 % CI {ci[0]:.2f}–{ci[1]:.2f})" if ci else ""
        head = (
            f"**Run `{run_id}`**, scored by `{judge}` on {summary.get('scored', 0)} of "
            f"{summary.get('n', 0)} replies: **mean {shown}**{interval}."
        )
    return f"{head}\n\n{_not_judged(summary)}"


def position_bias_markdown(summary: dict[str, Any]) -> str:
    """How often the judge picked the reply shown first (pairwise only)."""
    bias, n = summary.get("position_bias"), summary.get("position_bias_n") or 0
    if bias is None:
        return "**Position bias:** n/a (no answer picked a side)."
    note = (
        "no bias"
        if abs(bias - 0.5) < 0.1
        else "leans to the " + ("first" if bias > 0.5 else "second")
    )
    return (
        f"**Position bias: {bias:.2f}**. Of {n} judge answers that picked a side, {bias:.0%} "
        f"picked the reply shown first (0.5 is none; 1.0 always the first): {note}. The swap "
        "turns a pick that follows the position into a tie."
    )


def details_table(details: pd.DataFrame, mode: str) -> pd.DataFrame:
    """The per-prompt table with readable headings, None shown as blank."""
    columns = PAIRWISE_COLUMNS if mode == "pairwise" else RUBRIC_COLUMNS
    frame = pd.DataFrame({heading: details.get(c) for c, heading in columns.items()},
                         index=details.index)  # fmt: skip
    return frame.astype(object).where(frame.notna(), "")


def figure(mode: str, summary: dict[str, Any]) -> go.Figure:
    """Pairwise: win/tie/loss shares with Wilson error bars; rubric: the score counts."""
    fig = go.Figure()
    if mode == "pairwise":
        names, kinds = ["wins", "ties", "losses"], ("win", "tie", "loss")
        shares = [summary.get(f"{k}_rate") for k in kinds]
        intervals = [summary.get(f"{k}_rate_ci95") for k in kinds]
        y = [s if isinstance(s, int | float) else 0.0 for s in shares]
        plus = [(c[1] - v) if c else 0.0 for c, v in zip(intervals, y, strict=True)]
        minus = [(v - c[0]) if c else 0.0 for c, v in zip(intervals, y, strict=True)]
        counts = [summary.get(k, 0) for k in names]
        fig.add_trace(
            go.Bar(
                x=names,
                y=y,
                marker={"color": [WIN, TIE, LOSS]},
                text=[f"{c} ({v:.0%})" for c, v in zip(counts, y, strict=True)],
                textposition="outside",
                error_y={"type": "data", "array": plus, "arrayminus": minus, "visible": True},
            )
        )
        fig.update_yaxes(title_text="share of judged prompts", range=[0, 1.15], tickformat=".0%")
        title = f"Against {summary.get('against')}: 95 % Wilson intervals"
    else:
        scores = summary.get("scores") or {}
        xs = list(range(1, 11))
        ys = [sum(v for k, v in scores.items() if _bucket(k) == x) for x in xs]
        fig.add_trace(go.Bar(x=xs, y=ys, marker={"color": SCORE_COLOUR}, name="replies"))
        mean = summary.get("mean_score")
        if isinstance(mean, int | float):
            fig.add_vline(x=mean, line={"color": "#111827", "dash": "dash"},
                          annotation_text=f"mean {mean:.2f}")  # fmt: skip
        fig.update_xaxes(title_text="score", dtick=1, range=[0.5, 10.5])
        fig.update_yaxes(title_text="replies")
        title = "Score distribution"
    fig.update_layout(
        title=title,
        height=320,
        margin={"l": 60, "r": 20, "t": 50, "b": 40},
        template="plotly_white",
        showlegend=False,
    )
    return fig


def _bucket(key: Any) -> int | None:
    """A score key of the summary's counts ("7.0") as its whole-number bar."""
    try:
        value = float(key)
    except (TypeError, ValueError):
        return None
    return int(math.floor(value + 0.5)) if math.isfinite(value) else None


def progress_text(state: str | None, row: dict[str, Any] | None) -> str:
    """'generating replies: 12 / 40' while it runs; the state before the first row."""
    if state == "queued":
        return "queued: waiting for the device"
    if not row:
        return f"{state or 'starting'}…"
    stage = "generating replies" if row.get("stage") == "generating" else "asking the judge"
    return f"{stage}: {row.get('done', 0)} / {row.get('total', 0)}"
