"""Pure drawing for a judge's agreement with the person's feedback: a summary in, text out.

Like `judge_view.py`, nothing here calls the API or touches Gradio. The figures (accuracy with
its Wilson interval, kappa with its analytic interval, position bias, flip rate, the number of
cases), the plain warning when agreement is low or measured on too few cases, the one line
shown beside a judge's choice wherever a judge gates data, and the disagreements side by side.
"""

from __future__ import annotations

import html
from typing import Any

import pandas as pd

NEVER = (
    "Agreement with your feedback: not measured for this judge yet. Check it in the Evaluate "
    "tab's Judge section (Check against my feedback) before letting it gate data."
)
DISAGREEMENT_COLUMNS = {
    "prompt": "prompt",
    "reply_a": "reply A",
    "reply_b": "reply B (pairs only)",
    "human": "your verdict",
    "verdict": "judge's verdict",
    "rationale": "judge's rationale",
}


def _num(value: Any, digits: int = 2) -> str:
    return "n/a" if not isinstance(value, int | float) else f"{value:.{digits}f}"


def _interval(value: Any) -> str:
    if not isinstance(value, list | tuple) or len(value) != 2:
        return ""
    return f" (95 % {value[0]:.2f} to {value[1]:.2f})"


def summary_markdown(summary: dict[str, Any], cached: bool = False) -> str:
    """The figures of one measurement, with how they were computed."""
    judge = summary.get("judge") or "the judge"
    head = (
        f"**`{judge}` against your feedback**, {summary.get('judged', 0)} of "
        f"{summary.get('n', 0)} cases judged ({summary.get('pairwise_n', 0)} pairs asked in "
        f"both orders, {summary.get('rubric_n', 0)} replies scored alone, liked at "
        f"{_num(summary.get('threshold'), 0)}/10 or more): **accuracy "
        f"{_num(summary.get('accuracy'))}**{_interval(summary.get('accuracy_ci95'))}, Wilson; "
        f"**Cohen's kappa {_num(summary.get('kappa'))}**{_interval(summary.get('kappa_ci95'))}, "
        "analytic standard error (0 is chance, 1 perfect)."
    )
    bias = (
        f"Position bias {_num(summary.get('position_bias'))} (the share of "
        f"{summary.get('position_bias_n', 0)} pairwise answers that picked the reply shown "
        f"first; 0.5 is none); flip rate {_num(summary.get('flip_rate'))} (pairs whose verdict "
        f"followed the position). Not judged: {summary.get('not_judged', 0)}."
    )
    when = f"Measured {summary.get('measured_at', '')}" + (
        ", read from the cache (the judge was not asked again)." if cached else "."
    )
    return f"{head}\n\n{bias} {when}"


def warning_html(text: str | None) -> str:
    """An amber box with the warning, or nothing."""
    if not text:
        return ""
    return (
        '<div class="df-agreement-warning" role="status" style="border:1px solid #f59e0b;'
        'background:#fffbeb;color:#78350f;border-radius:8px;padding:8px 12px">'
        f"<strong>Careful:</strong> {html.escape(text)}</div>"
    )


def short_line(summary: dict[str, Any] | None) -> str:
    """Beside a judge's choice: the last measured agreement (with its warning), or a hint."""
    if not summary:
        return NEVER
    kappa, n = summary.get("kappa"), summary.get("judged", 0)
    low = summary.get("warning")
    mark = "⚠ " if low else ""
    line = (
        f"{mark}Agreement with your feedback (last measured {summary.get('measured_at', '')}): "
        f"accuracy {_num(summary.get('accuracy'))}, kappa {_num(kappa)}"
        f"{_interval(summary.get('kappa_ci95'))}, n={n}."
    )
    return f"{line} {low}" if low else line


def disagreements_table(cases: pd.DataFrame) -> pd.DataFrame:
    """The cases where the judge and the person differ, side by side, None shown as blank."""
    if cases.empty or "agree" not in cases:
        return pd.DataFrame(columns=list(DISAGREEMENT_COLUMNS.values()))
    rows = cases[cases["agree"].eq(False)]
    frame = pd.DataFrame(
        {heading: rows.get(c) for c, heading in DISAGREEMENT_COLUMNS.items()}, index=rows.index
    )
    return frame.astype(object).where(frame.notna(), "")
