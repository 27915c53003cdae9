"""How the Pipelines tab draws a pipeline: its header line, the timeline of its steps (state,
duration, summary, run) and a one-line label per step. Pure functions of the record
(`dragonfarm_core.rundir.pipeline_record`), so a reloaded page or a second browser draws the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pandas as pd

from ui import present

TIMELINE_COLUMNS = ["#", "step", "state", "duration", "summary", "run"]
STATE_MARKS = {"pending": "·", "running": "▶", "succeeded": "✓", "failed": "✗", "cancelled": "■"}
# Summary keys shown first, when a step's summary has them; the rest follow in record order.
FIRST_KEYS = ("method", "train_loss", "eval_loss", "perplexity", "rows", "win_rate",
              "wins", "ties", "losses", "mean_score", "path", "url")  # fmt: skip
NOT_SHOWN = frozenset({"run", "state", "file", "label"})  # in their own columns; paths are long
MAX_SUMMARY_ITEMS = 6


def _stamp(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text)) if text else None
    except ValueError:
        return None


def duration_s(entry: dict[str, Any], now: datetime | None = None) -> float | None:
    """Seconds a step (or a record) took: started to finished, or to `now` while running."""
    start = _stamp(entry.get("started_at"))
    end = _stamp(entry.get("finished_at")) or now
    if start is None or end is None:
        return None
    if start.tzinfo is not None and end.tzinfo is None:
        end = end.replace(tzinfo=start.tzinfo)
    return (end - start).total_seconds()


def _value_text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def summary_text(summary: dict[str, Any] | None) -> str:
    """A step's summary as "train loss 0.33, eval loss 0.41" (at most MAX_SUMMARY_ITEMS)."""
    if not isinstance(summary, dict):
        return ""
    keys = [k for k in FIRST_KEYS if k in summary]
    keys += [k for k in summary if k not in keys]
    items = [
        f"{k.replace('_', ' ')} {_value_text(summary[k])}"
        for k in keys
        if k not in NOT_SHOWN and summary[k] is not None and not isinstance(summary[k], dict | list)
    ]
    return ", ".join(items[:MAX_SUMMARY_ITEMS])


def timeline_table(record: dict[str, Any], now: datetime | None = None) -> pd.DataFrame:
    """One row per step: number, kind, state (marked), duration, summary (or error), run."""
    rows = []
    for i, step in enumerate(record.get("steps") or []):
        state = str(step.get("state") or "pending")
        running = state == "running"
        detail = step.get("error") or summary_text(step.get("summary"))
        rows.append([
            i + 1,
            step.get("kind", "?"),
            f"{STATE_MARKS.get(state, '?')} {state}",
            present.duration_text(duration_s(step, now if running else None)),
            str(detail),
            step.get("run") or "",
        ])  # fmt: skip
    return pd.DataFrame(rows, columns=TIMELINE_COLUMNS)


def header_markdown(record: dict[str, Any], now: datetime | None = None) -> str:
    """**running** · pipeline `<id>` of `<model>` · step 2 of 3 · 1 min 05 s; then its error."""
    status = record.get("status") or "unknown"
    steps = record.get("steps") or []
    done = sum(s.get("state") == "succeeded" for s in steps)
    current = record.get("current")
    where = (f"step {current + 1} of {len(steps)}" if isinstance(current, int)
             else f"{done} of {len(steps)} steps done")  # fmt: skip
    active = status in ("queued", "running")
    took = present.duration_text(duration_s(record, now if active else None))
    line = (f"**{status}** · pipeline `{record.get('id')}` of `{record.get('model')}` · {where}"
            + (f" · {took}" if took else ""))  # fmt: skip
    lines = [line]
    if record.get("error"):
        lines.append(f"Error: {record['error']}")
    if status in ("failed", "cancelled"):
        lines.append("Resume continues from the first unfinished step.")
    return "  \n".join(lines)


def choice_label(row: dict[str, Any]) -> str:
    """A `list_pipelines` row as the picker shows it: "<id> (running, 1/3)"."""
    return f"{row.get('id')} ({row.get('status')}, {row.get('done')}/{row.get('steps')})"


def step_label(index: int, step: Any, settings: Sequence[str] = ()) -> str:
    """A step of the builder's list: "2. evaluate (metrics: all)"."""
    extra = f" ({', '.join(settings)})" if settings else ""
    return f"{index + 1}. {step.kind}{extra}"
