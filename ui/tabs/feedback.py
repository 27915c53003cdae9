"""The Feedback tab: every rating and edit from the Chat tab, and the data made from them.

The table and counts read the events file only (showing them writes nothing); a `gr.Timer`
re-reads it when its size or time changes, so ratings from another browser or a Python session
appear by themselves. "Build SFT dataset" and "Build preference pairs" call `dragon.feedback`
once, which writes `sft-<time>.jsonl` and `pairs-<time>.jsonl` under the runs folder's
feedback/, and hand the dataset to the Train tab as the mapped dataset. Preference pairs can
also come from a run's own samples ranked by a judge (`ui.pairs_panel`), without ratings.
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.conversation.feedback_store import (
    EVENTS_FILE,
    damage_note,
    feedback_dir,
    judgments,
    pair_rows,
    read_events_checked,
    sft_rows,
)
from dragonfarm_core.data.codegen import literal, runs_dir_argument
from ui import pairs_panel, present
from ui.context import AppContext

TITLE = "Feedback"
TICK_S = 2.0
# time, feedback, run or model, prompt, reply, edit: the three texts share most of the row, so
# the reply and the edit stay on screen at 1400 px, and no header is narrower than its words
# (without widths the prompt took the row and "feedback" broke into "feedbac k").
COLUMN_WIDTHS: list[str | int] = ["10%", "8%", "16%", "22%", "22%", "22%"]
EMPTY = (
    "No feedback yet: rate replies (👍 Good / 👎 Bad) or edit them in the Chat tab, or add a "
    "conversation as a training example; they appear here."
)
WHAT = {
    "sft": ("SFT dataset", "liked or edited reply", "dragon.train(fb.sft, {model})"),
    "pairs": ("preference pairs", "prompt with a liked and a disliked reply",
              'dragon.prefer(fb.pairs, {model}, method="dpo")'),
}  # fmt: skip


def events_version(runs_dir: Path) -> tuple[int, int] | None:
    """(modified time, size) of the events file, or None while there is none."""
    try:
        stat = os.stat(feedback_dir(runs_dir) / EVENTS_FILE)
    except FileNotFoundError:
        return None
    return stat.st_mtime_ns, stat.st_size


def show(runs_dir: Path) -> tuple[Any, ...]:
    """-> (records table, counts, version seen). Lines of the events file that cannot be read
    are skipped and said under the counts."""
    version = events_version(runs_dir)  # before reading: a write during the read shows next tick
    events, damaged = read_events_checked(runs_dir)
    note = present.error_html(damage_note(damaged, runs_dir))
    if not events:
        return present.feedback_table([]), present.hint_html(EMPTY) + note, version
    judged = judgments(events)
    counts = present.feedback_counts(events, len(sft_rows(judged)), len(pair_rows(judged)))
    return present.feedback_table(events), counts + (f"\n\n{note}" if note else ""), version


def tick(runs_dir: Path, seen: Any) -> tuple[Any, ...]:
    """Timer tick: re-read only when the events file changed."""
    version = events_version(runs_dir)
    if (tuple(seen) if seen is not None else None) == version:
        return gr.skip(), gr.skip(), gr.skip()
    return show(runs_dir)


def feedback_call(runs_dir: Path) -> str:
    return f"fb = dragon.feedback({runs_dir_argument(runs_dir) or ''})"


def feedback_code(kind: str, runs_dir: Path, records: Any, model: dragon.ResolvedModel) -> str:
    """fb = dragon.feedback(...); then training on what was built, from the run people rated."""
    runs = [r for r in records["run"].dropna() if r] if len(records) else []
    start = f"dragon.open_run({literal(runs[-1])})" if runs else literal(model.name)
    lines = [
        feedback_call(runs_dir),
        "print(fb.records)",
        f"run = {WHAT[kind][2].format(model=start)}",
    ]
    return present.python_code("\n".join(lines))


def build_data(kind: str, runs_dir: Path, model: dragon.ResolvedModel) -> tuple[Any, ...]:
    """Build -> (mapped dataset for the Train tab, message, code, error, table, counts, seen)."""
    try:
        fb = dragon.feedback(runs_dir)
    except (ValueError, OSError) as e:
        return gr.skip(), "", gr.skip(), present.error_html(str(e)), *show(runs_dir)
    data = fb.sft if kind == "sft" else fb.pairs
    path = fb.sft_path if kind == "sft" else fb.pairs_path
    name, unit, _ = WHAT[kind]
    if data is None or path is None:  # feedback() writes the file exactly when it builds data
        problem = f"No {name} yet: that needs at least one {unit}."
        return gr.skip(), "", gr.skip(), present.error_html(problem), *show(runs_dir)
    rows = f"{len(data)} row{'' if len(data) == 1 else 's'}"
    told = (
        f"Built the {name}: **{rows}** in `{Path(path).name}`. The Train tab now trains on it "
        "(it replaces the mapped dataset)."
    )
    if kind == "pairs":
        told += " Pairs train with DPO or ORPO (`dragon.prefer`), as in the code below."
    code = feedback_code(kind, runs_dir, fb.records, model)
    return data, told, code, "", *show(runs_dir)


def build(ctx: AppContext) -> None:
    table, counts, _ = show(ctx.runs_dir)
    with gr.Row():
        refresh = gr.Button("Refresh", size="sm", scale=0, elem_id="feedback-refresh")
        make_sft = gr.Button("Build SFT dataset", variant="primary", elem_id="feedback-sft")
        make_pairs = gr.Button("Build preference pairs", elem_id="feedback-pairs")
    summary = gr.Markdown(counts, elem_id="feedback-counts")
    built = gr.Markdown(elem_id="feedback-built")
    error = gr.HTML(elem_id="feedback-error")
    records = gr.Dataframe(
        table, label="Feedback events, newest first", interactive=False, wrap=True,
        column_widths=COLUMN_WIDTHS, elem_id="feedback-records",
    )  # fmt: skip
    code = gr.Code(
        present.python_code(feedback_call(ctx.runs_dir) + "\nprint(fb.records)"),
        language="python", label="Python", interactive=False, show_line_numbers=False,
        elem_id="feedback-code",
    )  # fmt: skip
    version = gr.State(None)  # per page: the first tick reads the events

    listing = [records, summary, version]
    ctx.on_load(partial(show, ctx.runs_dir), listing)  # with login: the user's own feedback
    ctx.on_load(lambda: present.python_code(feedback_call(ctx.runs_dir) + "\nprint(fb.records)"),
                [code])  # fmt: skip
    refresh.click(partial(show, ctx.runs_dir), None, listing)
    for kind, button in (("sft", make_sft), ("pairs", make_pairs)):
        button.click(
            partial(build_data, kind, ctx.runs_dir),
            ctx.model,
            [ctx.mapped, built, code, error, *listing],
        )
    gr.Timer(TICK_S).tick(partial(tick, ctx.runs_dir), version, listing, show_progress="hidden")
    pairs_panel.build_pairs(ctx)  # pairs from a run's own samples, under a judge
