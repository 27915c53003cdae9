"""Pure formatting for the app: core objects in, markdown, HTML and tables out.

Nothing here calls the API or touches Gradio, so every function is testable on plain values.
Text that came from a user's data is always HTML-escaped before it goes into HTML.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from dragonfarm_core.data.codegen import literal
from dragonfarm_core.data.example import EXAMPLE_FILE

PREVIEW_ROWS = 20
CELL_CHARS = 300

# One colour per kind of preview segment: (label in the legend, background, text colour).
SEGMENT_STYLES: dict[str, tuple[str, str, str]] = {
    "masked": ("masked (context)", "#eceff3", "#4b5563"),
    "learned": ("learned", "#c9f0d3", "#14532d"),
    "rejected": ("rejected (trained away from)", "#fbd5d5", "#7f1d1d"),
    "reference": ("reference answer (for rewards, not trained on)", "#fdf0c4", "#713f12"),
}
# A segment is (text, kind), kind one of SEGMENT_STYLES; an example is a list of segments.
Segment = tuple[str, str]


def python_code(body: str, imports: Sequence[str] = ()) -> str:
    """A code panel's text: the imports, then `body`. The example file's absolute path becomes
    `dragon.example_data()`, so the snippet runs on any machine."""
    body = body.replace(literal(str(EXAMPLE_FILE)), "dragon.example_data()")
    head = "".join(f"import {name}\n" for name in imports) + ("\n" if imports else "")
    return head + "import dragonfarm_core as dragon\n\n" + body.rstrip() + "\n"


def report_code(model_name: str | None, var: str = "ds") -> str:
    """The line that prints a dataset's report, with the model's tokenizer when one is used."""
    arg = f"tokenizer=dragon.resolve_model({literal(model_name)}).base" if model_name else ""
    return f"print({var}.report({arg}).to_markdown())"


def table_preview(frame: pd.DataFrame, n: int = PREVIEW_ROWS) -> pd.DataFrame:
    """The first `n` rows, long cells shortened so the table stays readable."""

    def shorten(cell: Any) -> str:
        text = "" if cell is None or pd.isna(cell) else str(cell)
        return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"

    head = frame.head(n)
    return pd.DataFrame({str(c): [shorten(v) for v in head[c]] for c in head.columns})


def dataset_summary(name: str, fmt: str | None, rows: int, columns: Sequence[str]) -> str:
    """One line about a loaded dataset, e.g. '**tickets** (csv): 120 rows, columns `a`, `b`'."""
    cols = ", ".join(f"`{c}`" for c in columns)
    return f"**{name}** ({fmt or 'in memory'}): {rows} rows, {len(columns)} columns: {cols}"


def error_html(message: str | None) -> str:
    """A visible red box with the message, or nothing when there is no error."""
    if not message:
        return ""
    return (
        '<div class="df-error" role="alert" style="border:1px solid #ef4444;'
        "background:#fef2f2;color:#7f1d1d;border-radius:8px;padding:10px 14px;"
        'white-space:pre-wrap"><strong>Problem:</strong> ' + html.escape(message) + "</div>"
    )


def hint_html(message: str) -> str:
    """A quiet grey line saying what to do next."""
    return f'<div class="df-hint" style="color:#6b7280;padding:6px 0">{html.escape(message)}</div>'


def _segment_html(text: str, kind: str) -> str:
    label, background, colour = SEGMENT_STYLES[kind]
    span = (
        f'<span class="df-{kind}" title="{html.escape(label)}" style="background:{background};'
        f'color:{colour};border-radius:3px">{html.escape(text)}</span>'
    )
    if kind in ("rejected", "reference"):
        # An alternative to the learned reply, not a continuation of it: start a new line.
        caption = "rejected reply" if kind == "rejected" else "reference answer"
        return f'\n<span style="font-size:11px;color:#6b7280">— {caption} —</span>\n' + span
    return span


def legend_html(kinds: Sequence[str]) -> str:
    """Coloured swatches naming each kind of segment shown."""
    items = [
        f'<span style="margin-right:14px"><span style="display:inline-block;width:12px;'
        f"height:12px;background:{SEGMENT_STYLES[k][1]};border:1px solid #9ca3af;"
        f'vertical-align:middle;margin-right:4px"></span>{html.escape(SEGMENT_STYLES[k][0])}'
        "</span>"
        for k in kinds
    ]
    return (
        '<div class="df-legend" style="font-size:13px;margin-bottom:6px">'
        + "".join(items)
        + "</div>"
    )


def chat_preview_html(examples: Sequence[Sequence[Segment]], template_name: str) -> str:
    """The examples as the model sees them: masked context and learned text in two colours."""
    if not examples:
        return '<div class="df-preview-empty">Nothing to preview yet.</div>'
    shown = {kind for segments in examples for _, kind in segments}
    kinds = [k for k in SEGMENT_STYLES if k in shown or k == "masked"]
    blocks = []
    for i, segments in enumerate(examples, start=1):
        body = "".join(_segment_html(text, kind) for text, kind in segments)
        blocks.append(
            f'<div class="df-example"><div style="font-size:12px;color:#6b7280">example {i}</div>'
            '<pre style="white-space:pre-wrap;word-break:break-word;font-size:13px;margin:2px 0 '
            f'12px;padding:8px;border:1px solid #e5e7eb;border-radius:6px">{body}</pre></div>'
        )
    note = (
        f'<div style="font-size:12px;color:#6b7280">Rendered with the chat template of '
        f"{html.escape(template_name)}. Only the learned part counts in the loss.</div>"
    )
    return '<div class="df-preview">' + legend_html(kinds) + "".join(blocks) + note + "</div>"


def model_markdown(name: str, folder: str, revision: str | None, bundled: bool) -> str:
    """What the Model tab says about the current choice."""
    where = "bundled with dragonfarm, works offline" if bundled else f"folder `{folder}`"
    rev = f", revision `{revision}`" if revision else ""
    return f"**Current model:** `{name}` ({where}{rev})"


def check_markdown(summary: str) -> str:
    """`dragon.check()`'s summary lines as a markdown list."""
    return "\n".join(f"- {line}" for line in summary.splitlines() if line.strip())


def presets_table(presets: pd.DataFrame) -> pd.DataFrame:
    """The presets with readable column headers, in rank order."""
    table = presets.sort_values("rank")[
        ["id", "params", "license", "gated", "min_vram_gb", "notes"]
    ]
    table = table.assign(gated=table["gated"].map({True: "yes", False: "no"}))
    return table.rename(columns={"id": "model", "min_vram_gb": "VRAM GB"})


def portable_code(code: str) -> str:
    """`dragon.code(run)`'s text with the example file's path as `dragon.example_data()`."""
    return code.replace(literal(str(EXAMPLE_FILE)), "dragon.example_data()")


def duration_text(seconds: float | None) -> str:
    """45 s, 3 min 05 s, 2 h 07 min."""
    if seconds is None or pd.isna(seconds):
        return ""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def run_header(config: dict[str, Any], status: dict[str, Any]) -> str:
    """What the Monitor says about a run: state, model, data, device, and how it ended."""
    state = status.get("state") or "unknown"
    model = (config.get("model") or {}).get("name", "?")
    data = config.get("data") or {}
    lines = [
        f"**{state}** · run `{config.get('id')}` · {str(config.get('method', '')).upper()} "
        f"of `{model}` on {data.get('n_train', '?')} rows ({data.get('n_eval', 0)} held out)"
    ]
    if config.get("continued_from"):
        lines.append(f"Continues from run `{Path(config['continued_from']).name}`.")
    if status.get("device"):
        trainable, total = status.get("params_trainable"), status.get("params_total")
        params = f", {trainable:,} of {total:,} parameters trainable" if trainable else ""
        lines.append(f"Device {status['device']} ({status.get('dtype')}){params}.")
    metrics = status.get("metrics") or {}
    shown = [f"{k.replace('_', ' ')} {v:.4g}" for k, v in metrics.items() if _is_number(v)]
    if shown and state in ("succeeded", "cancelled"):
        lines.append("Final: " + ", ".join(shown) + ".")
    if state == "failed":
        lines.append(f"Failed ({status.get('reason') or 'error'}): {status.get('error') or ''}")
    if state in ("failed", "cancelled"):
        lines.append("Resume picks it up from its newest checkpoint.")
    return "  \n".join(lines)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _local_time(stamp: Any) -> str:
    if stamp is None or pd.isna(stamp):
        return ""
    return stamp.to_pydatetime().astimezone().strftime("%Y-%m-%d %H:%M")


def runs_table(frame: pd.DataFrame) -> pd.DataFrame:
    """dragon.runs() with local start times, readable durations and rounded losses."""
    return pd.DataFrame(
        {
            "id": frame["id"],
            "name": frame["name"],
            "state": frame["state"],
            "model": frame["model"],
            "method": frame["method"],
            "started": [_local_time(t) for t in frame["started"]],
            "duration": [duration_text(d) for d in frame["duration"]],
            "final loss": ["" if pd.isna(x) else f"{x:.4f}" for x in frame["final_loss"]],
            "continued from": frame["continued_from"].fillna(""),
        }
    )


def samples_table(samples: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """samples.json as a table: the held-out prompt, the data's reply, the model's reply."""
    return pd.DataFrame(
        [[s.get("prompt", ""), s.get("reference", ""), s.get("generated", "")] for s in samples],
        columns=["prompt", "reference", "generated"],
    )


def settings_call(settings: Any) -> str | None:
    """`dragon.Lora(r=8)` for the fields that differ from the defaults; None when none do."""
    cls, default = type(settings), type(settings)()
    parts = [
        f"{f.name}={literal(getattr(settings, f.name))}"
        for f in dataclasses.fields(cls)
        if f.name != "extra" and getattr(settings, f.name) != getattr(default, f.name)
    ]
    return f"dragon.{cls.__name__}({', '.join(parts)})" if parts else None
