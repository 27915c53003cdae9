"""The Compare tab: runs side by side. The `dragon.compare` table with the best value of each
column marked, one curve of every picked run overlaid (over steps or epochs), the settings two
of them differ in, their replies to the same held-out prompts, and the code.

With no run picked, the table holds every run in the runs folder. The picker takes any text
(its choices follow the runs folder), so every run a handler is given is resolved with
`refs.resolve_run` in the app's runs dir first: one outside it is refused on the page, nothing
of it is read, and no call naming it goes into the code panel. Drawing is in `ui.compare_view`.

A sweep picked under Sweeps shows its trials ranked by its objective, the best marked, and
Optuna's parameter-importance and parallel-coordinate plots of its study (`ui.sweep_view`).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.codegen.run import compare_code, home_argument
from dragonfarm_core.codegen.sweep import compare_sweep_code
from dragonfarm_core.rundir import files, refs, sweep_record
from ui import compare_view, present, sweep_panel, sweep_view, table_widths, watch
from ui.context import AppContext

TITLE = "Compare"
ERRORS = (FileNotFoundError, ValueError, TypeError, OSError)
DEFAULT_CURVE = "loss"
# Run A and Run B list only the runs picked at the top (or every run after Refresh): an empty
# list with "pick two runs above" left a new user nowhere to go.
NO_PAIR = (
    "Pick runs in Runs at the top (or press Refresh for every run), then two of them as Run A"
    " and Run B: the settings they differ in and their replies show side by side."
)
SAME_PAIR = "A and B are the same run; pick two different runs."
NO_SHARED = "The two runs have no samples for the same prompts (samples.json)."
CODE_HINT = "# The Python that builds this table appears here."
NO_SWEEP = "Pick a sweep: its trials ranked by its objective, and what mattered."


def run_choices(runs_dir: Path) -> list[tuple[str, str]]:
    """Every run, newest first, as (label, run folder)."""
    table = dragon.runs(runs_dir)
    return [(f"{r.id} ({r.method}, {r.state})", str(runs_dir / r.id)) for r in table.itertuples()]


def refresh_runs(runs_dir: Path, seen: int | None, current: list[str] | None) -> tuple[Any, Any]:
    """The picker was opened -> (picker update, version seen); reads the runs only when one
    changed since the last look, and keeps the picked runs that are still there."""
    return watch.refresh_picker(runs_dir, seen, list(current or []), run_choices, lambda v: None)


def _resolved(picks: Sequence[str] | None, runs_dir: Path) -> list[Path]:
    """The picked runs' folders in the runs dir (refs.resolve_run raises for any other)."""
    return [refs.resolve_run(pick, runs_dir) for pick in picks or [] if pick]


def _refused(error: Exception, n: int) -> tuple[Any, ...]:
    """`n` outputs left as they were, then the error box."""
    gr.Warning(html.escape(str(error).splitlines()[0]))
    return (*(gr.skip(),) * n, present.error_html(str(error)))


def curves(
    picks: Sequence[str] | None, curve: str | None, axis: str | None, *, runs_dir: Path
) -> tuple[Any, ...]:
    """The curve or the axis changed -> (chart, error): `curve` of every picked run."""
    try:
        dirs = _resolved(picks, runs_dir)
        progress = [(d.name, dragon.open_run(d).progress()) for d in dirs]
    except ERRORS as e:
        return _refused(e, 1)
    figure = compare_view.overlay_figure(progress, curve or DEFAULT_CURVE, axis or "step")
    return figure, present.error_html("")


def _samples(run_dir: Path) -> list[dict[str, Any]]:
    """samples.json's rows ([] when there are none, or the file cannot be read)."""
    try:
        rows = files.read_samples(run_dir) or []
    except (OSError, ValueError):  # not JSON, not UTF-8: shown as no samples
        return []
    return [row for row in rows if isinstance(row, dict)] if isinstance(rows, list) else []


def pair(a: str | None, b: str | None, *, runs_dir: Path) -> tuple[Any, ...]:
    """Run A or B changed -> (config diff, samples side by side, note, error)."""
    hidden = gr.update(visible=False)
    if not a or not b:
        return hidden, hidden, present.hint_html(NO_PAIR), present.error_html("")
    try:
        first, second = refs.resolve_run(a, runs_dir), refs.resolve_run(b, runs_dir)
        configs = files.read_config(first), files.read_config(second)
    except ERRORS as e:
        return _refused(e, 3)
    if first == second:
        return hidden, hidden, present.hint_html(SAME_PAIR), present.error_html("")
    labels = (first.name, second.name)
    diff = compare_view.config_diff(*configs, labels)
    side = compare_view.samples_side_by_side(_samples(first), _samples(second), labels)
    differ = "setting differs" if len(diff) == 1 else "settings differ"
    note = f"**{len(diff)}** {differ} between `{first.name}` (A) and `{second.name}` (B)."
    if side.empty:
        note += " " + NO_SHARED
    # Widths per column: without them the prompt column takes the row and pushes A's and B's
    # replies, what the user came to see, off-screen.
    return (
        gr.update(value=diff, visible=True, column_widths=table_widths.column_widths(diff)),
        gr.update(
            value=side, visible=not side.empty, column_widths=table_widths.column_widths(side)
        ),
        note,
        present.error_html(""),
    )


def _pair_choice(dirs: list[Path], current: str | None, other: str | None) -> Any:
    """Run A's or B's picker: the picked runs; its run kept while it is picked (and not the
    other picker's), else the first picked run the other picker does not show."""
    values = [str(d) for d in dirs]
    keep = current
    if current not in values or current == other:
        keep = next((v for v in values if v != other), None)
    return gr.update(choices=[(d.name, str(d)) for d in dirs], value=keep)


def show(
    picks: Sequence[str] | None,
    curve: str | None,
    axis: str | None,
    a: str | None,
    b: str | None,
    *,
    runs_dir: Path,
) -> tuple[Any, ...]:
    """The picks changed (or Refresh) -> (table, legend, chart, A, B, diff, samples, note,
    code, error). No run picked: every run in the runs dir, in the table only."""
    try:
        dirs = _resolved(picks, runs_dir)
        table = dragon.compare(*dirs, runs_dir=runs_dir)  # none: every run in the runs dir
    except ERRORS as e:
        return _refused(e, 9)
    chart, _ = curves([str(d) for d in dirs], curve, axis, runs_dir=runs_dir)
    a_update = _pair_choice(dirs, a, None)
    b_update = _pair_choice(dirs, b, a_update["value"])
    diff, side, note, _ = pair(a_update["value"], b_update["value"], runs_dir=runs_dir)
    shown = compare_view.comparison_table(table)
    return (
        table_widths.fitted(shown, visible=not table.empty),  # headers unbroken ("meth od")
        compare_view.legend_text(table) if len(table) else present.hint_html("No runs yet."),
        chart,
        a_update,
        b_update,
        diff,
        side,
        note,
        compare_code(dirs, runs_dir),
        present.error_html(""),
    )


def sweep_choices(runs_dir: Path, current: str | None) -> Any:
    """The sweep picker was opened -> its choices, the pick kept while it is listed."""
    listed = sweep_panel.choices(runs_dir)
    keep = current if current in {value for _, value in listed} else None
    return gr.update(choices=listed, value=keep)


def _study(path: Path, record: dict[str, Any]) -> Any:
    """The sweep's Optuna study, read from its study.db (None before the sweep opened it)."""
    db = sweep_record.study_path(path)
    if not db.is_file():  # load_study would make an empty one
        return None
    import optuna  # on first use: the app starts without it

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(storage=f"sqlite:///{db}", study_name=record["id"])


def _figures(path: Path, record: dict[str, Any]) -> tuple[Any, Any, str]:
    try:
        study = _study(path, record)
        if study is None:
            return None, None, sweep_view.NO_PLOTS
        return sweep_view.study_figures(study, record)
    except Exception as e:  # noqa: BLE001 (Optuna's and SQLite's errors alike: only the plots are lost)
        return None, None, f"The plots cannot be drawn: {type(e).__name__}: {e}"


def show_sweep(ref: str | None, *, runs_dir: Path) -> tuple[Any, ...]:
    """A sweep picked -> (ranked trials, note, importance plot, parallel plot, code, error)."""
    hidden = gr.update(value=None, visible=False)
    if not ref:
        table = gr.update(visible=False)
        return table, present.hint_html(NO_SWEEP), hidden, hidden, gr.skip(), ""
    try:
        path = sweep_panel.resolve_sweep(ref, runs_dir)
        record = dragon.open_sweep(path).status()
    except ERRORS as e:
        return _refused(e, 5)
    importance, parallel, missing = _figures(path, record)
    ranked = sweep_view.ranked_table(record)
    done = sweep_view.complete_trials(record)
    note = (
        f"{sweep_view.header_markdown(record)}  \n{sweep_view.BEST} marks the best of "
        f"{done} complete trial{'s' if done != 1 else ''}; pruned and failed trials follow."
    )
    if missing:
        note += f"  \n{missing}"
    code = compare_sweep_code(record, str(sweep_record.study_path(path)),
                                   home_argument(runs_dir))  # fmt: skip
    return (
        table_widths.fitted(ranked, visible=True),
        note,
        gr.update(value=importance, visible=importance is not None),
        gr.update(value=parallel, visible=parallel is not None),
        code,
        present.error_html(""),
    )


def _widgets() -> dict[str, Any]:
    """Every component of the tab, by name, in page order."""
    w: dict[str, Any] = {}
    with gr.Row():
        w["picker"] = gr.Dropdown(
            [], value=[], multiselect=True, label="Runs", scale=5, elem_id="compare-runs",
            info="Open the list to refresh it; none picked: the table shows every run.",
            allow_custom_value=True,  # choices follow the runs folder; each pick is checked
        )  # fmt: skip
        w["refresh"] = gr.Button("Refresh", scale=1, elem_id="compare-refresh")
    w["error"] = gr.HTML(elem_id="compare-error")
    w["table"] = gr.Dataframe(label="Runs side by side", interactive=False, visible=False,
                              wrap=True, elem_id="compare-table")  # fmt: skip
    w["legend"] = gr.Markdown(present.hint_html("Pick runs, or press Refresh for every run."),
                              elem_id="compare-legend")  # fmt: skip
    with gr.Row():
        w["curve"] = gr.Dropdown(
            compare_view.curve_choices(), value=DEFAULT_CURVE, label="Curve", scale=3,
            info="Or type any progress.jsonl column, e.g. reward_exact (a GRPO reward).",
            allow_custom_value=True, elem_id="compare-curve",
        )  # fmt: skip
        w["axis"] = gr.Radio(list(compare_view.AXES), value="step", label="Over", scale=1,
                             elem_id="compare-axis")  # fmt: skip
    w["chart"] = gr.Plot(label="The picked runs' curves", elem_id="compare-chart")
    with gr.Row():
        w["a"] = gr.Dropdown([], value=None, label="Run A", elem_id="compare-a")
        w["b"] = gr.Dropdown([], value=None, label="Run B", elem_id="compare-b")
    w["note"] = gr.Markdown(present.hint_html(NO_PAIR), elem_id="compare-note")
    w["diff"] = gr.Dataframe(label="Settings that differ (config.json)", interactive=False,
                             visible=False, wrap=True, elem_id="compare-diff")  # fmt: skip
    w["samples"] = gr.Dataframe(label="The same held-out prompts: the data's reply, A's, B's",
                                interactive=False, visible=False, wrap=True,
                                elem_id="compare-samples")  # fmt: skip
    with gr.Accordion("Sweeps", open=True):
        w["sweep"] = gr.Dropdown([], value=None, label="Sweep", allow_custom_value=True,
                                 info="Open the list to refresh it. Its runs side by side: "
                                 "pick them in Runs above.", elem_id="compare-sweep")  # fmt: skip
        w["sweep_note"] = gr.Markdown(present.hint_html(NO_SWEEP), elem_id="compare-sweep-note")
        w["ranked"] = gr.Dataframe(label="Trials, best first", interactive=False,
                                   visible=False, wrap=True, elem_id="compare-ranked")  # fmt: skip
        with gr.Row():
            w["importance"] = gr.Plot(label="Parameter importance", visible=False,
                                      elem_id="compare-importance")  # fmt: skip
            w["parallel"] = gr.Plot(label="Parallel coordinates", visible=False,
                                    elem_id="compare-parallel")  # fmt: skip
    w["code"] = gr.Code(CODE_HINT, language="python", label="Python", interactive=False,
                        show_line_numbers=False, elem_id="compare-code")  # fmt: skip
    return w


def build(ctx: AppContext) -> None:
    w = _widgets()
    seen = gr.State(None)
    inside = ctx.runs_dir  # every handler resolves the runs it is given in it
    inputs = [w["picker"], w["curve"], w["axis"], w["a"], w["b"]]
    view = [w[k] for k in ("table", "legend", "chart", "a", "b", "diff", "samples", "note",
                           "code", "error")]  # fmt: skip
    w["picker"].change(partial(show, runs_dir=inside), inputs, view)
    w["refresh"].click(partial(show, runs_dir=inside), inputs, view)
    w["picker"].focus(partial(refresh_runs, inside), [seen, w["picker"]], [w["picker"], seen])
    for changed in (w["curve"], w["axis"]):
        changed.change(partial(curves, runs_dir=inside), inputs[:3], [w["chart"], w["error"]])
    swept = [w[k] for k in ("ranked", "sweep_note", "importance", "parallel", "code", "error")]  # fmt: skip
    w["sweep"].input(partial(show_sweep, runs_dir=inside), w["sweep"], swept)
    w["sweep"].focus(partial(sweep_choices, inside), w["sweep"], w["sweep"])
    for changed in (w["a"], w["b"]):
        changed.input(
            partial(pair, runs_dir=inside),
            [w["a"], w["b"]],
            [w["diff"], w["samples"], w["note"], w["error"]],
        )
