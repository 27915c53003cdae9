"""The Monitor tab: a run's state, progress, training curves, log, samples, code; cancel, resume.

Everything shown is read from the run's files, so a reloaded page or a second browser sees the
same run. A `gr.Timer` ticks every second; a tick compares the run's change counter
(`ui.watch`, fed by filesystem events) with the one this page last saw and reads nothing when
they match. A queued or running run is re-read every LIVENESS_S anyway: a trainer that died
writes nothing, and reading its status is what notices that (and reports it failed).

The picker takes any text (its choices follow the runs folder), so every handler resolves it
with `refs.resolve_run` against the app's runs dir first: a run outside it is refused on the
page, and is never read, watched, cancelled or resumed.
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

import dragonfarm_core as dragon
from dragonfarm_core.rundir import files, refs
from ui import (
    charts,
    present,
    queue_panel,
    remote_panel,
    run_outcome,
    table_widths,
    triage_panel,
    watch,
)
from ui.context import AppContext

TITLE = "Monitor"
TICK_S = 1.0
LIVENESS_S = 10.0
LOG_LINES = 40
CANCEL_TIMEOUT_S = 60.0
ACTIVE = ("queued", "running")
RESUMABLE = ("failed", "cancelled")
# Runs in the browser: keep the newest log line in view (Gradio's autoscroll misses the first
# value a page gets).
SCROLL_LOG = """() => setTimeout(() => {
    const box = document.querySelector('#monitor-log textarea');
    if (box) box.scrollTop = box.scrollHeight;
}, 50)"""
NO_RUN = "No run selected: start one in the Train tab, or open one in the Runs tab."
REFUSED = "Pick one of the listed runs."
N_VIEW = 11  # what show() returns: header ... error, outcome, seen


@dataclass(frozen=True)
class Seen:
    """What this page last read: which run, at which change count, when, and was it active."""

    run: str | None
    version: int | None
    read_at: float
    active: bool


def run_choices(runs_dir: Path) -> list[tuple[str, str]]:
    """Every run, newest first, as (label, run folder)."""
    table = dragon.runs(runs_dir)
    return [(f"{r.id} ({r.state})", str(runs_dir / r.id)) for r in table.itertuples()]


def _empty(message: str, seen: Seen, error: str = "") -> tuple[Any, ...]:
    off = gr.update(interactive=False)
    hidden = gr.update(visible=False)
    chart = charts.progress_figure(pd.DataFrame())
    return message, "", chart, "", hidden, "", off, off, present.error_html(error), "", seen


def _version(run_dir: str, runs_dir: Path) -> int | None:
    """The change counter of the folder `run_dir` names in the runs dir (there or not yet);
    None for one outside it: a folder a page names elsewhere is never watched."""
    try:
        return watch.run_version(refs.resolve_inside(run_dir, runs_dir, "runs directory"))
    except refs.OutsideFolderError:
        return None


def _samples(run_dir: Path, message: str) -> tuple[list[dict[str, Any]], str]:
    """samples.json's rows, and the message to show: a damaged file is said, not raised."""
    try:
        samples = files.read_samples(run_dir) or []
    except (OSError, ValueError) as e:  # ValueError: not JSON, or not UTF-8
        problem = f"{files.SAMPLES} cannot be read ({e}); the samples are not shown."
        return [], "\n".join(m for m in (message, problem) if m)
    rows = samples if isinstance(samples, list) else []
    return [s for s in rows if isinstance(s, dict)], message


def show(run_dir: str | None, message: str = "", *, runs_dir: Path) -> tuple[Any, ...]:
    """Read a run -> (header, progress bar, chart, log, samples, code, cancel button, resume
    button, error box, seen). A run outside `runs_dir` is refused, with nothing read."""
    if not run_dir:
        return _empty(present.hint_html(NO_RUN), Seen(None, None, time.monotonic(), False))
    version = _version(run_dir, runs_dir)  # before reading: a write during the read shows next tick
    try:
        found = refs.resolve_run(run_dir, runs_dir)
    except FileNotFoundError:
        gone = f"Run {Path(run_dir).name} is gone (archived or deleted); pick another run."
        return _empty(present.hint_html(gone), Seen(run_dir, version, time.monotonic(), False))
    except ValueError as e:  # outside the runs dir (refs.OutsideFolderError), or blank
        seen = Seen(run_dir, version, time.monotonic(), False)
        return _empty(present.hint_html(REFUSED), seen, str(e))
    run = dragon.open_run(found)
    status, progress = run.status(), run.progress()
    state = status.get("state")
    etas = progress["eta_s"].dropna()
    steps = progress["step"].dropna()
    step = status.get("step") or (int(steps.iloc[-1]) if len(steps) else 0)
    bar = charts.progress_html(
        state,
        step,
        status.get("total_steps"),
        etas.iloc[-1] if len(etas) else None,
        status.get("phase"),
    )
    samples, message = _samples(run.dir, message) if state == "succeeded" else ([], message)
    outcome = _outcome(run, status, progress, samples) if state == "succeeded" else ""
    table = present.samples_table(samples)
    widths = table_widths.column_widths(table)  # every column on screen at 1400 px
    shown = gr.update(value=table, visible=bool(samples), column_widths=widths)
    try:
        config, code = run.config, present.portable_code(dragon.code(run))
    except files.ConfigDamagedError:  # the status (state damaged) says what is wrong and the fix
        config, code = {"id": run.id}, ""
    return (
        present.run_header(config, status),
        bar,
        charts.progress_figure(progress, config.get("method")),
        "\n".join(run.logs(LOG_LINES)),
        shown,
        code,
        gr.update(interactive=state in ACTIVE, value="Cancel"),
        gr.update(interactive=state in RESUMABLE),
        present.error_html(message),
        outcome,
        Seen(run_dir, version, time.monotonic(), state in ACTIVE),
    )


def _outcome(
    run: dragon.Run, status: dict[str, Any], progress: pd.DataFrame, samples: list[dict[str, Any]]
) -> str:
    """The "what changed" box of a succeeded run (ui.run_outcome), from its files."""
    try:
        results = files.read_eval(run.dir) or {}
    except (OSError, ValueError):  # a damaged eval.json: the sentence says nothing was measured
        results = {}
    metrics = status.get("metrics") or {}
    return run_outcome.outcome_html(
        str(run.config.get("method") or "sft"), results if isinstance(results, dict) else {},
        run_outcome.start_row(progress), metrics if isinstance(metrics, dict) else {}, samples,
        (run.config.get("data") or {}).get("n_eval"),
    )  # fmt: skip


def tick(run_dir: str | None, seen: Seen | None, *, runs_dir: Path) -> tuple[Any, ...]:
    """Timer tick: read the run only if its files changed, or it is active and LIVENESS_S old."""
    if seen is not None and seen.run == run_dir:
        unchanged = run_dir is None or _version(run_dir, runs_dir) == seen.version
        due = seen.active and time.monotonic() - seen.read_at >= LIVENESS_S
        if unchanged and not due:
            return (gr.skip(),) * N_VIEW
    return show(run_dir, runs_dir=runs_dir)


def cancel(run_dir: str | None, *, runs_dir: Path) -> tuple[Any, ...]:
    """Cancel: the trainer stops after its current step and keeps a checkpoint."""
    if not run_dir:
        return show(None, runs_dir=runs_dir)
    try:
        dragon.cancel(refs.resolve_run(run_dir, runs_dir), timeout=CANCEL_TIMEOUT_S)
    except (FileNotFoundError, RuntimeError, ValueError) as e:
        return show(run_dir, str(e), runs_dir=runs_dir)
    return show(run_dir, runs_dir=runs_dir)


def resume(run_dir: str | None, *, runs_dir: Path) -> tuple[Any, ...]:
    """Resume a failed or cancelled run from its newest checkpoint; returns at once."""
    if not run_dir:
        return show(None, runs_dir=runs_dir)
    try:
        dragon.resume(refs.resolve_run(run_dir, runs_dir))
    except (FileNotFoundError, RuntimeError, ValueError) as e:
        gr.Warning(html.escape(str(e)))
        return show(run_dir, str(e), runs_dir=runs_dir)
    return show(run_dir, runs_dir=runs_dir)


def pick(run_dir: str | None, *, runs_dir: Path) -> Any:
    """A run picked here becomes the selected run for the other tabs too (one in the runs dir
    only: anything else leaves the selection as it was)."""
    if not run_dir:
        return run_dir
    try:
        return str(refs.resolve_run(run_dir, runs_dir))
    except (FileNotFoundError, ValueError):
        return gr.skip()


def select(runs_dir: Path, wanted: str | None) -> Any:
    """The selected run (from Train or Runs) becomes the picked one, with fresh choices."""
    choices = run_choices(runs_dir)
    values = [value for _, value in choices]
    return gr.update(choices=choices, value=wanted if wanted in values else None)


def refresh_choices(runs_dir: Path, seen: int | None, current: str | None) -> tuple[Any, Any]:
    """Timer tick -> (picker update, version seen): new runs appear in the picker; with
    nothing picked, the newest run is shown. Reads nothing while no run changed."""
    return watch.refresh_picker(
        runs_dir, seen, current, run_choices, lambda values: values[0] if values else None
    )


def build(ctx: AppContext) -> None:
    with gr.Row():
        # Its choices follow the runs folder; a run can go between a refresh and a pick, and
        # `show` says so, so Gradio need not refuse a value it has not listed yet.
        picker = gr.Dropdown(
            [], value=None, label="Run", scale=4, allow_custom_value=True, elem_id="monitor-run"
        )
        stop = gr.Button("Cancel", interactive=False, scale=1, elem_id="monitor-cancel")
        again = gr.Button("Resume", interactive=False, scale=1, elem_id="monitor-resume")
    header = gr.Markdown(present.hint_html(NO_RUN), elem_id="monitor-header")
    importing = remote_panel.import_controls(ctx, picker, "monitor")  # a bundled run's results
    bar = gr.HTML(elem_id="monitor-progress")
    outcome = gr.HTML(elem_id="monitor-outcome")  # what a succeeded run changed
    error = gr.HTML(elem_id="monitor-error")
    fixes = triage_panel.build()  # a failed run: what went wrong, a button per fix
    chart = gr.Plot(label="Training curves", elem_id="monitor-chart")
    log = gr.Textbox(
        label=f"Log (last {LOG_LINES} lines)",
        lines=10,
        max_lines=10,
        autoscroll=True,
        interactive=False,
        elem_id="monitor-log",
    )
    samples = gr.Dataframe(
        # The caption names the table's own columns (present.samples_table), then says each.
        label="Held-out samples: prompt, reference (the data's reply), generated (the run's reply)",
        interactive=False,
        wrap=True,
        visible=False,
        elem_id="monitor-samples",
    )
    code = gr.Code(
        "",
        language="python",
        label="Python",
        interactive=False,
        show_line_numbers=False,
        elem_id="monitor-code",
    )
    seen, seen_runs = gr.State(None), gr.State(None)
    timer = gr.Timer(TICK_S)

    view = [header, bar, chart, log, samples, code, stop, again, error, outcome, seen]
    quiet: dict[str, Any] = {"show_progress": "hidden"}
    inside = ctx.runs_dir  # every handler resolves the picked run in it
    picker.change(partial(show, runs_dir=inside), picker, view, **quiet)
    picker.input(partial(pick, runs_dir=inside), picker, ctx.run)
    ctx.run.change(partial(select, ctx.runs_dir), ctx.run, picker)
    timer.tick(partial(tick, runs_dir=inside), [picker, seen], view, **quiet)
    timer.tick(
        partial(refresh_choices, ctx.runs_dir), [seen_runs, picker], [picker, seen_runs], **quiet
    )
    stop.click(lambda: gr.update(value="Cancelling…", interactive=False), None, stop).then(
        partial(cancel, runs_dir=inside), picker, view
    )
    again.click(partial(resume, runs_dir=inside), picker, view)
    triage_panel.wire(fixes, picker, ctx.run, inside, [header.change])
    log.change(None, None, None, js=SCROLL_LOG)
    remote_panel.wire_import(ctx, importing, picker, code)
    queue_panel.build(ctx.profile)  # lab: every user's queued and training runs
