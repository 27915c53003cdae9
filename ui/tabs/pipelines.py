"""The Pipelines tab: build a pipeline from steps, start it in the background, and watch it.

The builder (`ui.pipeline_builder`) keeps the steps; Start hands them to
`dragon.pipeline(..., background=True)`, which checks the chain and returns as soon as the
job is spawned. The watch part shows one pipeline, picked from `list_pipelines`: its header,
the timeline of its steps (`ui.pipeline_view`), the live curve and log of its current step's
run (the Monitor's chart), its code (`dragon.code(p)`), and Cancel / Resume. Everything shown
is read from the record, so a reloaded page or a second browser sees the same pipeline; a
`gr.Timer` re-reads it only when the record or the current run changed (or, while it is
active, every LIVENESS_S, which is how a dead job is noticed and reported failed).

The picker takes any text, so every handler resolves what it names inside the runs dir's
pipelines/ folder first (`resolve_pipeline`), and every run a record names with
`refs.resolve_run`: what lies outside is refused on the page and never read, cancelled or
resumed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

import dragonfarm_core as dragon
from dragonfarm_core.codegen.run import comment_lines
from dragonfarm_core.pipelines.pipeline import list_pipelines
from dragonfarm_core.rundir import files, refs
from ui import charts, pipeline_builder, pipeline_view, present, record_watch, watch
from ui.context import AppContext
from ui.record_watch import ERRORS, Seen

TITLE = "Pipelines"
TICK_S = 1.0
LOG_LINES = 40
NO_PIPELINE = "No pipeline yet: build one above and press Start."
CODE_HINT = "# Start or pick a pipeline; the Python that reproduces it appears here."


def resolve_pipeline(ref: str | None, runs_dir: Path) -> Path:
    """The record a page names (its id, or its path) in `runs_dir`/pipelines/; raises
    OutsideFolderError (a ValueError) for one outside, FileNotFoundError for none there."""
    home = runs_dir / files.PIPELINES_DIR
    return record_watch.resolve(ref, home, "pipeline", dragon.open_pipeline)


def choices(runs_dir: Path) -> list[tuple[str, str]]:
    """Every pipeline, newest first, as (label, record path)."""
    return [(pipeline_view.choice_label(row), row["path"]) for row in list_pipelines(runs_dir)]


def _run_of(record: dict[str, Any], runs_dir: Path) -> tuple[int | None, dragon.Run | None]:
    """The step to follow (the current one, else the last that made a run) and its run, the
    run resolved in the runs dir (a record naming a folder elsewhere gets no run)."""
    steps = record.get("steps") or []
    current = record.get("current")
    made = [i for i, s in enumerate(steps) if s.get("run_dir")]
    index = current if isinstance(current, int) and 0 <= current < len(steps) else None
    if index is None or not steps[index].get("run_dir"):
        index = made[-1] if made else index
    if index is None or not steps[index].get("run_dir"):
        return index, None
    try:
        return index, dragon.open_run(refs.resolve_run(steps[index]["run_dir"], runs_dir))
    except (FileNotFoundError, ValueError):
        return index, None


def _version(path: Path, runs_dir: Path) -> Any:
    """Changes whenever the record or the run it follows is written."""
    try:
        stat = path.stat()
        record = files.read_json(path)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    _, run = _run_of(record, runs_dir)
    return stat.st_mtime_ns, stat.st_size, None if run is None else watch.run_version(run.dir)


def _empty(message: str, seen: Seen, error: str = "") -> tuple[Any, ...]:
    off = gr.update(interactive=False)
    chart = charts.progress_figure(pd.DataFrame())
    table = pd.DataFrame(columns=pipeline_view.TIMELINE_COLUMNS)
    return message, table, chart, "", CODE_HINT, off, off, present.error_html(error), seen


def _code(path: Path) -> str:
    try:
        return present.portable_code(dragon.code(path))
    except (ValueError, TypeError, OSError) as e:
        # The reason may quote the record: as comment lines, a line break in it is no code.
        return comment_lines(f"The code cannot be written for this pipeline: {e}")


def _live_view(record: dict[str, Any], runs_dir: Path) -> tuple[Any, str]:
    """(chart, log) of the step the page follows: its run's curve and log while it trains,
    else the pipeline's own log."""
    _, run = _run_of(record, runs_dir)
    if run is None:
        return charts.progress_figure(pd.DataFrame()), ""
    chart = charts.progress_figure(run.progress(), run.config.get("method"))
    return chart, "\n".join(run.logs(LOG_LINES))


def show(ref: str | None, message: str = "", *, runs_dir: Path) -> tuple[Any, ...]:
    """Read a pipeline -> (header, timeline, chart, log, code, cancel, resume, error, seen)."""
    if not ref:
        return _empty(present.hint_html(NO_PIPELINE), record_watch.seen(None))
    try:
        path = resolve_pipeline(ref, runs_dir)
    except ValueError as e:  # outside the pipelines folder, or blank
        return _empty(present.hint_html(NO_PIPELINE), record_watch.seen(ref), str(e))
    except FileNotFoundError as e:
        return _empty(present.hint_html(str(e)), record_watch.seen(ref))
    version = _version(path, runs_dir)  # before reading: a write during the read shows next tick
    p = dragon.open_pipeline(path)
    record = p.status()  # a pipeline whose process died is reported failed here
    stamp = datetime.now(UTC)
    chart, log = _live_view(record, runs_dir)
    if not log:
        log = "\n".join(p.logs(LOG_LINES))
    status = record.get("status")
    return (
        pipeline_view.header_markdown(record, stamp),
        pipeline_view.timeline_table(record, stamp),
        chart,
        log,
        _code(path),
        *record_watch.buttons(status),
        present.error_html(message),
        record_watch.seen(ref, version, status),
    )


def tick(ref: str | None, seen: Seen | None, *, runs_dir: Path) -> tuple[Any, ...]:
    """Timer tick: read the pipeline only when it changed, or it is active and due a look."""
    if record_watch.unchanged(
        ref, seen, lambda r: _version(resolve_pipeline(r, runs_dir), runs_dir)
    ):
        return (gr.skip(),) * 9
    return show(ref, runs_dir=runs_dir)


def cancel(ref: str | None, *, runs_dir: Path) -> tuple[Any, ...]:
    """Cancel: asks the pipeline to stop (a training step keeps a checkpoint); returns at once."""
    return record_watch.then_show(
        lambda: dragon.pipeline_cancel(resolve_pipeline(ref, runs_dir), wait=False),
        partial(show, runs_dir=runs_dir), ref,
    )  # fmt: skip


def resume(ref: str | None, *, runs_dir: Path) -> tuple[Any, ...]:
    """Resume a failed or cancelled pipeline from its first unfinished step, in the background."""
    return record_watch.then_show(
        lambda: dragon.resume_pipeline(resolve_pipeline(ref, runs_dir), background=True),
        partial(show, runs_dir=runs_dir), ref, toast=True,
    )  # fmt: skip


def start(steps: list[Any] | None, model: dragon.ResolvedModel, name: str | None, *,
          runs_dir: Path) -> tuple[Any, ...]:  # fmt: skip
    """Start -> (picker, what started, error box): the pipeline runs as a background job."""
    try:
        if not steps:
            raise ValueError("Add at least one step before Start.")
        p = dragon.pipeline(model.name, list(steps), runs_dir=runs_dir,
                            name=(name or "").strip() or "pipeline", background=True)  # fmt: skip
    except ERRORS as e:
        watch.warn(str(e))
        return gr.skip(), gr.skip(), present.error_html(str(e))
    picked = gr.update(choices=choices(runs_dir), value=str(p.path))
    return picked, f"Started pipeline **`{p.id}`**: its timeline is below.", ""


def refresh_choices(runs_dir: Path, seen: Any, current: str | None) -> tuple[Any, Any]:
    """Timer tick -> (picker update, version seen): new pipelines appear; with none picked,
    the newest is shown (so a reloaded page reattaches). Reads nothing while none changed."""
    home = runs_dir / files.PIPELINES_DIR
    return record_watch.refresh_choices(home, seen, current, partial(choices, runs_dir))


def _watch_widgets() -> dict[str, Any]:
    w: dict[str, Any] = {}
    with gr.Row():
        w["picker"] = gr.Dropdown([], value=None, label="Pipeline", scale=4,
                                  allow_custom_value=True,  # each pick is checked
                                  elem_id="pipe-picker")  # fmt: skip
        w["cancel"] = gr.Button("Cancel", interactive=False, scale=1, elem_id="pipe-cancel")
        w["resume"] = gr.Button("Resume", interactive=False, scale=1, elem_id="pipe-resume")
    w["header"] = gr.Markdown(present.hint_html(NO_PIPELINE), elem_id="pipe-header")
    w["error"] = gr.HTML(elem_id="pipe-error")
    w["timeline"] = gr.Dataframe(pd.DataFrame(columns=pipeline_view.TIMELINE_COLUMNS),
                                 label="Steps", interactive=False, wrap=True,
                                 elem_id="pipe-timeline")  # fmt: skip
    w["chart"] = gr.Plot(label="The current step's curves", elem_id="pipe-chart")
    w["log"] = gr.Textbox(label=f"Log (last {LOG_LINES} lines)", lines=8, max_lines=8,
                          autoscroll=True, interactive=False, elem_id="pipe-log")  # fmt: skip
    w["code"] = gr.Code(CODE_HINT, language="python", label="Python", interactive=False,
                        show_line_numbers=False, elem_id="pipe-code")  # fmt: skip
    return w


def build(ctx: AppContext) -> None:
    inside = ctx.runs_dir  # every handler resolves what the page names in it
    with gr.Accordion("Build a pipeline", open=True):
        builder = pipeline_builder.build_builder(ctx)
        with gr.Row():
            name = gr.Textbox("pipeline", label="Pipeline name", scale=3, elem_id="pipe-name")
            go = gr.Button("Start pipeline", variant="primary", scale=1, elem_id="pipe-start")
        started = gr.Markdown(elem_id="pipe-started")
    w = _watch_widgets()
    seen = gr.State(None)
    timer = gr.Timer(TICK_S)
    view = [w[k] for k in ("header", "timeline", "chart", "log", "code", "cancel", "resume",
                           "error")] + [seen]  # fmt: skip
    go.click(partial(start, runs_dir=inside), [builder.steps, ctx.model, name],
             [w["picker"], started, builder.error])  # fmt: skip
    record_watch.wire(timer, w, view, seen, show=partial(show, runs_dir=inside),
                      tick=partial(tick, runs_dir=inside), refresh=partial(refresh_choices, inside),
                      cancel=partial(cancel, runs_dir=inside),
                      resume=partial(resume, runs_dir=inside))  # fmt: skip
