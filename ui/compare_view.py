"""Pure drawing for the Compare tab: the comparison table with the best values marked, one
curve of several runs overlaid, the settings two runs differ in, their samples side by side.

Like `charts.py` and `present.py`, nothing here calls the API or touches Gradio: frames and
dicts in, tables and figures out. Which value of a column is best comes with the table
(`dragon.compare(...).attrs["better"]`), so the core alone decides it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from ui.charts import CURVES, LEGEND, LOSS_COLOUR, MARGIN, REWARD_COLOURS
from ui.present import duration_text

BEST = "★"
ARROWS = {"lower": "↓", "higher": "↑"}
# Always shown, even where every picked run lacks them: they say which run a row is.
KEEP = ("id", "method", "state")
# Whole numbers in the table (counts and settings stored as floats for NaN's sake).
WHOLE = frozenset({"n_train", "n_eval", "lora_r", "group_size", "judge_n"})
# config.json keys that always differ between two runs and say nothing about how they trained.
NOT_SETTINGS = frozenset({"id", "created_at"})
RUN_COLOURS = (LOSS_COLOUR, *REWARD_COLOURS)
AXES = ("step", "epoch")


def curve_choices() -> list[tuple[str, str]]:
    """Every curve the Monitor draws, as (its legend name, its progress.jsonl column)."""
    return [(name, column) for column, (name, _line, _marker) in CURVES.items()]


def _has_value(column: pd.Series) -> bool:
    return bool(column.notna().any())


def best_rows(frame: pd.DataFrame, column: str, better: str) -> set[int]:
    """The rows holding the best value of `column`; none when fewer than two runs have one
    (one figure alone wins nothing)."""
    values = pd.to_numeric(frame[column], errors="coerce")
    if values.notna().sum() < 2:
        return set()
    target = values.min() if better == "lower" else values.max()
    return {i for i, v in enumerate(values) if not pd.isna(v) and math.isclose(v, target)}


def _cell(column: str, value: Any) -> str:
    """A value as the table shows it: '' where there is none (never 0)."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return ""
    if column == "duration":
        return duration_text(float(value))
    if column == "started":
        return pd.Timestamp(value).to_pydatetime().astimezone().strftime("%Y-%m-%d %H:%M")
    if column in WHOLE and isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def comparison_table(frame: pd.DataFrame) -> pd.DataFrame:
    """dragon.compare()'s table as shown: columns no run has a value in left out, the best
    value of each column marked BEST, its header saying which way is better (↓ lower, ↑
    higher). The figures that have a better way come right after the id: at the end of 18
    columns they were off-screen in a 1400 px window, the legend above naming them."""
    better: dict[str, str] = frame.attrs.get("better", {})
    kept = [c for c in frame.columns if c in KEEP or _has_value(frame[c])]
    figures = [c for c in kept if c in better]
    columns = kept[:1] + figures + [c for c in kept[1:] if c not in figures]
    shown = {}
    for column in columns:
        cells = [_cell(column, v) for v in frame[column]]
        way = better.get(column)
        if way:
            for i in best_rows(frame, column, way):
                cells[i] = f"{BEST} {cells[i]}"
        shown[f"{column} {ARROWS[way]}" if way else column] = cells
    return pd.DataFrame(shown, columns=list(shown))


def legend_text(frame: pd.DataFrame) -> str:
    """What the marks mean, per column that has a best value among the runs shown."""
    better: dict[str, str] = frame.attrs.get("better", {})
    marked = [c for c, way in better.items() if c in frame and best_rows(frame, c, way)]
    if not marked:
        return "The best value of a column is marked once two runs have a figure in it."
    lower = [c for c in marked if better[c] == "lower"]
    higher = [c for c in marked if better[c] == "higher"]
    parts = [f"lowest {', '.join(lower)}" if lower else "",
             f"highest {', '.join(higher)}" if higher else ""]  # fmt: skip
    return (
        f"{BEST} marks the best run per column: {'; '.join(p for p in parts if p)}. "
        "↓ lower is better, ↑ higher is better; a blank cell is a figure the run does not have."
    )


def overlay_figure(
    curves: Sequence[tuple[str, pd.DataFrame]], column: str, axis: str = "step"
) -> go.Figure:
    """`column` of each run's progress rows (label, rows), one line per run, over `axis`."""
    name = CURVES.get(column, (column,))[0]
    fig = go.Figure()
    for i, (label, progress) in enumerate(curves):
        rows = _points(progress, column, axis)
        fig.add_trace(go.Scatter(
            x=rows[axis].tolist(), y=rows[column].tolist(), name=label, mode="lines+markers",
            line={"color": RUN_COLOURS[i % len(RUN_COLOURS)]}, marker={"size": 5},
        ))  # fmt: skip
    fig.update_layout(
        height=420,
        margin=MARGIN,
        legend=LEGEND,
        hovermode="x unified",
        template="plotly_white",
        xaxis_title=axis,
        yaxis_title=name,
    )
    if not any(len(trace.x) for trace in fig.data):
        text = f"No picked run logged {name}." if curves else "Pick runs to overlay their curves."
        fig.add_annotation(text=text, showarrow=False, xref="paper", yref="paper", x=0.5,
                           y=0.6, font={"color": "#6b7280"})  # fmt: skip
    return fig


def _points(progress: pd.DataFrame, column: str, axis: str) -> pd.DataFrame:
    """The rows where both `axis` and `column` were logged, in axis order."""
    if column not in progress or axis not in progress or progress.empty:
        return pd.DataFrame({axis: [], column: []})
    rows = progress[[axis, column]].apply(pd.to_numeric, errors="coerce").dropna()
    return rows.sort_values(axis, kind="stable")


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """A config.json block as dotted keys -> its leaf values (lists and empty dicts whole)."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out |= _flat(inner, f"{prefix}.{key}" if prefix else str(key))
        return out
    return {prefix: value}


def same_value(a: Any, b: Any) -> bool:
    """Whether two config values are the same setting, however JSON spelled them: numbers
    compare as numbers (weight_decay 0 is 0.0), but a bool is never a number (True is not 1).

    >>> same_value(0, 0.0), same_value([1, 2.0], [1.0, 2]), same_value(True, 1)
    (True, True, False)
    """
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(same_value, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _text(value: Any) -> str:
    """A setting as the diff shows it (lists as JSON)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def config_diff(a: dict[str, Any], b: dict[str, Any], labels: tuple[str, str]) -> pd.DataFrame:
    """The settings of two runs' config.json that differ in value (dotted names), one row each;
    `labels` head the two value columns. A setting one run lacks shows as blank."""
    left = {k: v for k, v in _flat(a).items() if k.split(".")[0] not in NOT_SETTINGS}
    right = {k: v for k, v in _flat(b).items() if k.split(".")[0] not in NOT_SETTINGS}
    keys = [*left, *(k for k in right if k not in left)]
    rows = [
        [k, _text(left[k]) if k in left else "", _text(right[k]) if k in right else ""]
        for k in keys
        if k not in left or k not in right or not same_value(left[k], right[k])
    ]
    return pd.DataFrame(rows, columns=["setting", *_distinct(labels)])


def _distinct(labels: tuple[str, str]) -> list[str]:
    """Two column headers that Gradio can tell apart."""
    first, second = labels
    return [first, second] if first != second else [f"{first} (A)", f"{second} (B)"]


def samples_side_by_side(
    a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]], labels: tuple[str, str]
) -> pd.DataFrame:
    """The held-out prompts both runs have samples for, in the first run's order: the prompt,
    the data's reply, each run's reply."""
    theirs = {s.get("prompt"): s for s in b if isinstance(s, dict)}
    rows = [
        [s.get("prompt") or "", s.get("reference") or "", s.get("generated") or "",
         theirs[s.get("prompt")].get("generated") or ""]
        for s in a
        if isinstance(s, dict) and s.get("prompt") in theirs
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["prompt", "reference", *_distinct(labels)])
