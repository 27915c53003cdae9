"""Column widths for the app's wide tables (the Data preview, the Feedback events), so every
column shows in a 1400 px window.

Without widths, Gradio sizes a column by its content: one long text column takes the whole row
and pushes the columns to its right off-screen, and a column squeezed next to it breaks its
header mid-word ("feedbac k"). `column_widths` gives each column at least its header's longest
word, short columns (ids, dates, labels) what their cells need, and shares the rest among the
long text columns, whose cells wrap. A table with too many columns for the window gets those
minimum widths in pixels instead (cells up to a short text's room), and scrolls sideways rather
than break its headers.
"""

from __future__ import annotations

from typing import Any

import gradio as gr
import pandas as pd

CHAR_PX = 8.5  # a character of the table's monospace font, bold headers included
PAD_PX = 18  # a cell's padding and border
TABLE_PX = 1200  # the table's width in a 1400 px window (the page has margins)
LONG_CHARS = 32  # a column whose typical cell is longer holds text that wraps
MAX_CHARS = 60  # no column needs more than this many characters a line
LONG_MIN_CHARS = 20  # a text column narrower than this wraps into a ribbon


def _px(chars: float) -> float:
    return chars * CHAR_PX + PAD_PX


def _cell_chars(cell: Any) -> int:
    return 0 if cell is None or (isinstance(cell, float) and pd.isna(cell)) else len(str(cell))


def _need_and_want(frame: pd.DataFrame) -> tuple[list[float], list[float]]:
    """Per column: the width of its header's longest word, and what its cells would like
    (the 75th percentile of their lengths, capped)."""
    need, want = [], []
    for column in frame.columns:
        word = max((len(w) for w in str(column).split()), default=1)
        lengths = frame[column].map(_cell_chars)
        typical = float(lengths.quantile(0.75)) if len(lengths) else 0.0
        need.append(_px(word))
        want.append(_px(min(max(typical, word), MAX_CHARS)))
    return need, want


def _shares(floors: list[float], desire: list[float], room: float) -> list[float]:
    """Each floor plus a share of `room` in proportion to its desire (all of it if it fits)."""
    wanted = sum(desire)
    if wanted <= 0:
        return floors
    share = min(1.0, room / wanted)
    return [f + d * share for f, d in zip(floors, desire, strict=True)]


def column_widths(frame: pd.DataFrame) -> list[str | int]:
    """Gradio `column_widths` for `frame`: percentages that fill the table, or pixels (which
    scroll) when even the headers do not fit side by side."""
    need, want = _need_and_want(frame)
    long = [w > _px(LONG_CHARS) for w in want]
    floors = [
        max(n, _px(LONG_MIN_CHARS)) if is_long else n for n, is_long in zip(need, long, strict=True)
    ]
    if not floors or sum(floors) > TABLE_PX:
        # Scrolling sideways anyway: each column also gets its cells' room up to a short text's
        # (an id of 28 characters in a column sized for its header "id" stood 3 letters a line).
        short = _px(LONG_MIN_CHARS)
        return [round(max(n, min(w, short))) for n, w in zip(need, want, strict=True)]
    # Short columns first get what their cells need (ids and labels should not wrap), then the
    # long text columns share what is left, in proportion to how much they hold.
    short_desire = [
        0.0 if is_long else w - f for w, f, is_long in zip(want, floors, long, strict=True)
    ]
    widths = _shares(floors, short_desire, TABLE_PX - sum(floors))
    long_desire = [w if is_long else 0.0 for w, is_long in zip(want, long, strict=True)]
    widths = _shares(widths, long_desire, TABLE_PX - sum(widths))
    total = sum(widths)
    return [f"{100 * w / total:.1f}%" for w in widths]


def fitted(frame: pd.DataFrame, **changes: Any) -> Any:
    """A Dataframe update showing `frame` with its `column_widths` (and any other `changes`)."""
    return gr.update(value=frame, column_widths=column_widths(frame), **changes)
