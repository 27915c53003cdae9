"""Pure formatting for the app: core objects in, markdown, HTML and tables out.

Nothing here calls the API or touches Gradio, so every function is testable on plain values.
Text that came from a user's data is always HTML-escaped before it goes into HTML.
"""

from __future__ import annotations

import dataclasses
import html
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from dragonfarm_core.data.codegen import literal, portable
from dragonfarm_core.rundir import files

PREVIEW_ROWS = 20
CELL_CHARS = 300
CODE_SPAN = re.compile(r"`([^`\n]+)`")

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
    body = portable(body)
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


def message_html(message: str) -> str:
    """A plain-text message as HTML: escaped, its `code` spans (messages quote commands and
    names in backticks, as in markdown) as <code> instead of literal backticks."""
    return CODE_SPAN.sub(r"<code>\1</code>", html.escape(message))


def user_file_names(message: str, paths: Mapping[str, str]) -> str:
    """`message` with each server-side path in `paths` (an upload's copy under the runs folder)
    replaced by the file name the person uploaded: they never saw the copy's folder."""
    for path, name in sorted(paths.items(), key=lambda item: -len(item[0])):
        message = message.replace(path, name)
    return message


def error_html(message: str | None) -> str:
    """A visible red box with the message, or nothing when there is no error."""
    if not message:
        return ""
    return (
        '<div class="df-error" role="alert" style="border:1px solid #ef4444;'
        "background:#fef2f2;color:#7f1d1d;border-radius:8px;padding:10px 14px;"
        'white-space:pre-wrap"><strong>Problem:</strong> ' + message_html(message) + "</div>"
    )


def hint_html(message: str) -> str:
    """A quiet grey line saying what to do next."""
    return f'<div class="df-hint" style="color:#6b7280;padding:6px 0">{message_html(message)}</div>'


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
    return portable(code)


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
    if shown and state == "cancelled":  # a succeeded run's: ui.run_outcome, folded away
        lines.append("Final: " + ", ".join(shown) + ".")
    if state == "failed":
        lines.append(f"Failed ({status.get('reason') or 'error'}): {status.get('error') or ''}")
    if state == files.DAMAGED:
        lines.append(str(status.get("error") or f"{files.STATUS} cannot be read."))
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
            "trained on": frame["trained_on"].fillna(""),
        }
    )


def samples_table(samples: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """samples.json as a table: the held-out prompt, the data's reply, the model's reply."""
    return pd.DataFrame(
        [[s.get("prompt", ""), s.get("reference", ""), s.get("generated", "")] for s in samples],
        columns=["prompt", "reference", "generated"],
    )


def reward_settings_text(reward: Any) -> str:
    """A reward's own settings, e.g. 'pattern="^T-", case_sensitive=True' ('' for none)."""
    skip = {"type", "weight", "name"}
    parts = [
        f"{f.name}={literal(v) if isinstance(v, str) else repr(v)}"
        for f in dataclasses.fields(reward)
        if f.name not in skip and (v := getattr(reward, f.name)) != f.default
    ]
    return ", ".join(parts)


def rewards_table(rewards: Sequence[Any], names: Sequence[str]) -> pd.DataFrame:
    """The rewards a GRPO run will use: the name its progress column gets, type, weight."""
    return pd.DataFrame(
        [
            [name, r.type, r.weight, reward_settings_text(r)]
            for r, name in zip(rewards, names, strict=True)
        ],
        columns=["name", "type", "weight", "settings"],
    )


def dry_run_markdown(table: pd.DataFrame, names: Sequence[str], warned: Sequence[str]) -> str:
    """What a reward dry run says: the mean of each reward and of the total, and how many
    prompts gave every completion the same total (GRPO learns nothing from those)."""
    if table.empty:
        return "No completions were scored."
    means = ", ".join(f"{name} {table[name].mean():.3g}" for name in [*names, "total"])
    groups = table.groupby("prompt", sort=False)["total"]
    flat = int((groups.nunique() <= 1).sum())
    lines = [f"**Mean scores** over {len(table)} completions: {means}."]
    if flat:
        lines.append(
            f"{flat} of {groups.ngroups} prompts gave all their completions the same total: "
            "GRPO learns only from differences within a group, so those prompts teach nothing. "
            "A higher temperature, a larger group or a reward with partial credit helps."
        )
    lines += [f"Warning: {w}" for w in warned]
    return "  \n".join(lines)


# What evaluate()'s results are called on screen; other keys are shown as they are.
MEASURES = {
    "eval_loss": "eval loss",
    "perplexity": "perplexity",
    "eval_tokens": "held-out tokens",
    "eval_rows": "held-out rows",
    "pref_accuracy": "preference accuracy",
    "reward_margin": "reward margin",
    "eval_pairs": "held-out pairs",
    "reward": "mean reward (total)",
    "eval_prompts": "held-out prompts",
}


def evaluation_table(results: dict[str, Any]) -> pd.DataFrame:
    """eval.json as (measure, value) rows; a GRPO run's rewards also show the start model's
    score (start_reward...) beside them, so the table says whether training helped."""
    rows = []
    for key, value in results.items():
        if key == "step" or key.startswith("start_") or not (_is_number(value) or value is None):
            continue
        name = MEASURES.get(key) or (
            f"mean reward {key.removeprefix('reward_')}" if key.startswith("reward_") else key
        )
        start = f"start_{key}"
        before = _number_text(results[start]) if start in results else ""
        rows.append([name, _number_text(value), before])
    table = pd.DataFrame(rows, columns=["measure", "value", "model it started from"])
    has_start = any(key.startswith("start_") for key in results)
    return table if has_start else table.drop(columns="model it started from")


def _number_text(value: Any) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "n/a"
    return f"{value:,}" if isinstance(value, int) else f"{value:.4g}"


def metrics_table(metrics: dict[str, float | None]) -> pd.DataFrame:
    """Metric means over the samples, 'n/a' where no row could be scored."""
    return pd.DataFrame(
        [[name, "n/a" if mean is None else f"{mean:.4g}"] for name, mean in metrics.items()],
        columns=["metric", "mean over the samples"],
    )


def context_usage_markdown(name: str, usage: Any) -> str:
    """A chat's context use ('`run`: 312 of 1,024 tokens ...'); empty without a window."""
    if usage is None:
        return ""
    dropped = (
        f"; the {usage.dropped_turns} oldest messages are left out to fit"
        if usage.dropped_turns
        else ""
    )
    return (
        f"**Context** `{name}`: about {usage.tokens:,} of {usage.window:,} tokens used before "
        f"the next message{dropped}."
    )


# Keyed by (kind, verdict) as an event holds them: either may be missing (None).
FEEDBACK_KINDS: dict[tuple[str | None, str | None], str] = {
    ("rating", "up"): "👍 good",
    ("rating", "down"): "👎 bad",
    ("edit", None): "edited",
}


def feedback_table(events: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Feedback events, newest first: when, what, who answered, the prompt, reply and edit."""

    def cell(text: Any) -> str:
        text = "" if text is None else str(text)
        return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"

    rows = []
    for e in reversed(events):
        users = [m.get("content", "") for m in e.get("messages") or [] if m.get("role") == "user"]
        what = FEEDBACK_KINDS.get((e.get("kind"), e.get("verdict")), e.get("kind"))
        who = Path(e["run"]).name if e.get("run") else e.get("model") or ""
        time = str(e.get("time") or "")[:19].replace("T", " ")
        base = " (base)" if e.get("base") and e.get("run") else ""
        rows.append([time, what, who + base, cell(users[-1] if users else ""),
                     cell(e.get("reply")), cell(e.get("edited"))])  # fmt: skip
    return pd.DataFrame(
        rows, columns=["time", "feedback", "run or model", "prompt", "reply", "edit"]
    )


def feedback_counts(events: Sequence[dict[str, Any]], n_sft: int, n_pairs: int) -> str:
    """'3 👍 · 1 👎 · 2 edited → 4 SFT rows, 1 preference pair'."""
    kinds = [FEEDBACK_KINDS.get((e.get("kind"), e.get("verdict"))) for e in events]
    liked, disliked, edited = (kinds.count(k) for k in ("👍 good", "👎 bad", "edited"))
    pairs = f"{n_pairs} preference pair{'' if n_pairs == 1 else 's'}"
    return (
        f"**{len(events)} feedback events:** {liked} liked 👍 · {disliked} disliked 👎 · "
        f"{edited} edited → **{n_sft} SFT row{'' if n_sft == 1 else 's'}**, **{pairs}**"
    )
