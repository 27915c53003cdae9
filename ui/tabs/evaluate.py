"""The Evaluate tab: a finished run's held-out measurements, its sample replies, and metrics.

A run shown as picked (by hand, or selected on another tab) shows at once what its training
wrote (`evaluation.saved_evaluation`: eval.json and samples.json, read only) and the code.
Evaluate is `dragon.start_evaluation`: what training wrote is shown at once; measuring again with the saved adapter (when asked, or when
more samples are wanted than were written) is a background job (this process never loads a
model), and the handler returns at once. The page then watches the job as the Monitor tab
watches a run: a `gr.Timer`, active only while a job runs, ticks every TICK_S and reads the job
only when the run's change counter (`ui.watch`) moved, or every LIVENESS_S (a dead evaluator
writes nothing; reading its status is what notices it). It shows the job's state and log, and a
Cancel; when the job is done, its results. Chosen metrics score the sample replies and are
stored in the run, so the means stay with it. Below, the Judge section (`ui.judge_panel`) has a
language model judge the picked run, alone against a rubric or against another model. The picked run is resolved in the app's runs dir
(`refs.resolve_run`): one outside it is refused, not evaluated.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.data.codegen import literal
from dragonfarm_core.evaluation import evaluate as evaluation
from dragonfarm_core.rundir import files, refs
from ui import judge_panel, present, table_widths, watch
from ui.context import AppContext

TITLE = "Evaluate"
FINISHED = ("succeeded", "cancelled", "failed")
ACTIVE = ("queued", "running")
CODE_HINT = "# Pick a finished run; the Python that evaluates it appears here."
NO_RUN = "Pick a finished run (it is listed once its training has ended)."
NOT_WRITTEN = (
    "Run `{run}` has no evaluation from its training (eval.json): press Evaluate to measure "
    "it with its saved adapter."
)
EVALUATE_ERRORS = (ValueError, TypeError, OSError, RuntimeError)
TICK_S = 1.0
LIVENESS_S = 10.0
LOG_LINES = 20
CANCEL_TIMEOUT_S = 10.0
WAITING = {"queued": "queued, waiting for the device", "running": "running"}


@dataclass(frozen=True)
class Watching:
    """The evaluation this page is waiting for: the job, the code panel it shows, and what
    the page last read (the run's change counter, and when)."""

    pending: dragon.EvaluationJob
    code: str
    version: int | None
    read_at: float


def run_choices(runs_dir: Path) -> list[tuple[str, str]]:
    """Runs whose training has ended, newest first, as (label, run folder)."""
    table = dragon.runs(runs_dir)
    done = table[table["state"].isin(FINISHED)]
    return [(f"{r.id} ({r.method}, {r.state})", str(runs_dir / r.id)) for r in done.itertuples()]


def refresh_runs(runs_dir: Path, seen: int | None, current: str | None) -> tuple[Any, Any]:
    """The picker was opened -> (picker update, version seen); reads the runs only when one
    changed since the last look."""
    return watch.refresh_picker(runs_dir, seen, current, run_choices, lambda values: None)


def select(runs_dir: Path, wanted: str | None) -> Any:
    """The selected run (from Train, Monitor or Runs) is picked here too once it has ended."""
    return watch.select_run(runs_dir, wanted, run_choices)


def chosen_metrics(names: Sequence[str] | None, pattern: str | None) -> list[Any] | None:
    """The metrics to pass: the ticked names, then a regex metric; None when there are none
    (evaluate then returns the means stored earlier)."""
    metrics: list[Any] = list(names or [])
    regex = (pattern or "").strip()
    if regex:
        metrics.append(dragon.metric_regex(regex))
    return metrics or None


def evaluate_code(
    run_dir: str, n_samples: int, recompute: bool, names: Sequence[str], pattern: str | None
) -> str:
    """The Python of the same evaluation."""
    arguments = [literal(run_dir), f"n_samples={n_samples}"]
    arguments += ["recompute=True"] if recompute else []
    metrics = [literal(name) for name in names or []]
    regex = (pattern or "").strip()
    if regex:
        metrics.append(f"dragon.metric_regex({literal(regex)})")
    arguments += [f"metrics=[{', '.join(metrics)}]"] if metrics else []
    body = f"ev = dragon.evaluate({', '.join(arguments)})\nprint(ev)\nprint(ev.samples)\n"
    return present.python_code(body)


def _view(
    summary: Any = None,
    tables: tuple[Any, Any, Any] | None = None,
    code: Any = None,
    error: str = "",
    log: Any = None,
    watching: Watching | None = None,
) -> tuple[Any, ...]:
    """The outputs (summary, measures, metrics, samples, code, error, log, cancel button,
    evaluate button, timer, watching); what is None is left as it is."""
    keep = gr.skip()
    return (
        keep if summary is None else summary,
        *(tables if tables is not None else (keep,) * 3),
        keep if code is None else code,
        present.error_html(error),
        gr.update(visible=False) if log is None else gr.update(value=log, visible=True),
        *watch.job_buttons(watching is not None),
        watching,
    )


def _results(ev: Any, code: str) -> tuple[Any, ...]:
    """The outputs for a finished evaluation."""
    how = "measured again with the saved adapter" if ev.recomputed else "as training wrote it"
    n = len(ev.samples)
    summary = f"**Run `{ev.run_id}`** ({ev.method.upper()}): {n} sample{'s' * (n != 1)}, {how}."
    # Widths per column, or the prompt takes the row and the replies go off-screen.
    widths = table_widths.column_widths(ev.samples)
    tables = (
        gr.update(value=present.evaluation_table(ev.results), visible=True),
        gr.update(value=present.metrics_table(ev.metrics), visible=bool(ev.metrics)),
        gr.update(value=ev.samples, visible=True, column_widths=widths),
    )
    return _view(summary, tables, code)


def _refused(message: str) -> tuple[Any, ...]:
    watch.warn(message)
    return _view(error=message)


def _progress(watching: Watching, status: dict[str, Any]) -> tuple[Any, ...]:
    """The outputs while the job runs: its state, for how long, and its log."""
    state = status.get("state") or "queued"
    since = _epoch(status.get("started_at") or status.get("queued_at"))
    took = f" for {int(time.time() - since)} s" if since is not None else ""
    run = watching.pending.run
    summary = (
        f"**Run `{run.id}`** ({run.method.upper()}): measuring again with the saved adapter: "
        f"{WAITING.get(state, state)}{took}…"
    )
    log = "\n".join(watching.pending.logs(LOG_LINES))
    hidden = (gr.update(visible=False),) * 3
    return _view(summary, hidden, watching.code, log=log, watching=watching)


def _epoch(value: Any) -> float | None:
    """An ISO time from a status as seconds since the epoch (None when there is none)."""
    parsed = files.parse_iso(value)
    return parsed.timestamp() if parsed is not None else None


def _finished(watching: Watching) -> tuple[Any, ...]:
    """The outputs once the job ended: its results, or why there are none."""
    try:
        ev = watching.pending.result()
    except EVALUATE_ERRORS as e:
        watch.warn(str(e))
        log = "\n".join(watching.pending.logs(LOG_LINES))
        return _view(present.hint_html(str(e).splitlines()[0]), error=str(e), log=log)
    return _results(ev, watching.code)


def show(
    run_dir: str | None,
    names: Sequence[str] | None,
    pattern: str | None,
    n_samples: float | None,
    recompute: bool,
    watching: Watching | None,
    *,
    runs_dir: Path,
) -> tuple[Any, ...]:
    """A run is shown as picked (by hand, from another tab, or when the tab opens) -> what its
    training wrote and the code that evaluates it; nothing is measured. A recompute under way
    keeps its view."""
    if watching is not None:
        return (gr.skip(),) * 11
    hidden = (gr.update(visible=False),) * 3
    if not run_dir:
        return _view(present.hint_html(NO_RUN), hidden, CODE_HINT)
    try:
        path = refs.resolve_run(run_dir, runs_dir)  # refuses a run outside runs_dir
        n = max(0, int(n_samples or 0))
        ev = evaluation.saved_evaluation(path, n)
    except EVALUATE_ERRORS as e:
        return _view(present.hint_html(NO_RUN), hidden, CODE_HINT, error=str(e))
    code = evaluate_code(str(path), n, recompute, names or [], pattern)
    if ev is None:
        return _view(present.hint_html(NOT_WRITTEN.format(run=path.name)), hidden, code)
    return _results(ev, code)


def run_evaluation(
    run_dir: str | None,
    names: Sequence[str] | None,
    pattern: str | None,
    n_samples: float | None,
    recompute: bool,
    *,
    runs_dir: Path,
) -> tuple[Any, ...]:
    """Evaluate -> the outputs (see `_view`), at once: the results when what training wrote
    answers, else the recompute's job, which the timer then watches."""
    try:
        if not run_dir:
            raise ValueError(NO_RUN)
        run_dir = str(refs.resolve_run(run_dir, runs_dir))  # refuses a run outside runs_dir
        if n_samples is None:
            raise ValueError("Samples is empty; enter how many sample replies to show.")
        n = int(n_samples)
        pending = dragon.start_evaluation(run_dir, n_samples=n, recompute=recompute,
                                          metrics=chosen_metrics(names, pattern))  # fmt: skip
        code = evaluate_code(run_dir, n, recompute, names or [], pattern)
        if pending.job is None:
            return _results(pending.result(), code)
    except EVALUATE_ERRORS as e:
        return _refused(str(e))
    watching = Watching(pending, code, watch.run_version(run_dir), time.monotonic())
    return _progress(watching, pending.status())


def tick(watching: Watching | None) -> tuple[Any, ...]:
    """Timer tick: read the job only if the run's files changed, or every LIVENESS_S."""
    if watching is None:
        return (gr.skip(),) * 11
    version = watch.run_version(watching.pending.run.dir)
    due = time.monotonic() - watching.read_at >= LIVENESS_S
    if version == watching.version and not due:
        return (gr.skip(),) * 11
    status = watching.pending.status()
    seen = Watching(watching.pending, watching.code, version, time.monotonic())
    if status.get("state") in ACTIVE:
        return _progress(seen, status)
    return _finished(seen)


def cancel(watching: Watching | None) -> tuple[Any, ...]:
    """Cancel: the evaluator is interrupted; eval.json stays as it was unless it was written."""
    if watching is None:
        return _view()
    watching.pending.cancel(timeout=CANCEL_TIMEOUT_S)
    return _finished(watching)


def build(ctx: AppContext) -> None:
    with gr.Row():
        picker = gr.Dropdown(
            [],
            value=None,
            label="Run",
            info="Runs whose training has ended; open the list to refresh it.",
            allow_custom_value=True,  # choices follow the runs folder; evaluate checks the run
            scale=3,
            elem_id="evaluate-run",
        )
        n_samples = gr.Number(10, label="Samples", precision=0, minimum=0, scale=1,
                              info="Sample replies to show and score.", elem_id="evaluate-n")  # fmt: skip
        recompute = gr.Checkbox(
            False,
            label="Measure again",
            info="With the saved adapter (SFT, DPO, ORPO), instead of what training wrote.",
            scale=1,
            elem_id="evaluate-recompute",
        )
    with gr.Row():
        names = gr.CheckboxGroup(
            list(dragon.metrics()),
            label="Metrics (scored on the sample replies against the data's replies)",
            scale=3,
            elem_id="evaluate-metrics",
        )
        pattern = gr.Textbox(
            label="Regex metric (optional)",
            info="1 when a reply matches this pattern, e.g. ^T-\\d{4}",
            scale=2,
            elem_id="evaluate-regex",
        )
    with gr.Row():
        go = gr.Button("Evaluate", variant="primary", scale=4, elem_id="evaluate-go")
        stop = gr.Button("Cancel", interactive=False, scale=1, elem_id="evaluate-cancel")
    error = gr.HTML(elem_id="evaluate-error")
    summary = gr.Markdown(present.hint_html(NO_RUN), elem_id="evaluate-summary")
    log = gr.Textbox(
        label=f"Evaluator log (last {LOG_LINES} lines)",
        lines=6,
        max_lines=6,
        autoscroll=True,
        interactive=False,
        visible=False,
        elem_id="evaluate-log",
    )
    with gr.Row():
        measures = gr.Dataframe(
            label="Held-out evaluation",
            interactive=False,
            visible=False,
            scale=3,
            elem_id="evaluate-results",
        )
        metrics = gr.Dataframe(
            label="Metrics", interactive=False, visible=False, scale=2, elem_id="evaluate-scores"
        )
    samples = gr.Dataframe(
        label="Samples: prompt, the data's reply, the model's reply",
        interactive=False,
        wrap=True,
        visible=False,
        elem_id="evaluate-samples",
    )
    code = gr.Code(
        CODE_HINT,
        language="python",
        label="Python",
        interactive=False,
        show_line_numbers=False,
        elem_id="evaluate-code",
    )
    seen, watching = gr.State(None), gr.State(None)
    timer = gr.Timer(TICK_S, active=False)  # ticks only while a recompute runs

    view = [summary, measures, metrics, samples, code, error, log, stop, go, timer, watching]
    go.click(
        partial(run_evaluation, runs_dir=ctx.runs_dir),
        [picker, names, pattern, n_samples, recompute],
        view,
    )
    watch.wire_job(timer, stop, watching, view, tick, cancel)
    shown = partial(show, runs_dir=ctx.runs_dir)
    form = [picker, names, pattern, n_samples, recompute, watching]
    picker.change(shown, form, view)
    picker.focus(partial(refresh_runs, ctx.runs_dir), [seen, picker], [picker, seen])
    ctx.run.change(partial(select, ctx.runs_dir), ctx.run, picker)
    judge_panel.build(ctx, picker)  # the Judge section: the picked run, judged by an LLM
