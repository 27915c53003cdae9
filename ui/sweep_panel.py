"""The Train tab's Sweep: vary some of the run's settings over several runs, and watch them.

Start sweep reads the same widgets as Start (the Train tab's `read_spec`, passed in: tabs do
not import each other) plus the sweep form (`ui.sweep_form`), and calls `dragon.sweep`, which
checks the space, sampler, trial count and objective before anything is queued and returns as
soon as the sweep's job is spawned; a refusal (`dragon.SweepError`) shows in the error box
and nothing is queued. The watch part shows one sweep, picked from `dragon.list_sweeps`: its
header, its trials as they run (`ui.sweep_view`), its log, its code, Cancel and Resume. All of
it is read from the sweep's record, so a reloaded page or a second browser sees the same; a
`gr.Timer`, ticking only while the Sweep choice is shown, re-reads the record only when it
changed (or, while the sweep is active, every LIVENESS_S: how a dead sweep is noticed).

The picker takes any text, so every handler resolves what it names inside the runs dir's
sweeps/ folder first (`resolve_sweep`); what lies outside is refused and never read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

import dragonfarm_core as dragon
from dragonfarm_core.auth.profiles import Profile
from dragonfarm_core.codegen.run import comment_lines
from dragonfarm_core.rundir import files
from ui import named, present, queue_panel, record_watch, sweep_form, sweep_view, watch
from ui.context import AppContext
from ui.record_watch import ERRORS, Seen

TICK_S = 1.0
LOG_LINES = 20
NO_SWEEP = "No sweep yet: choose what to vary above and press Start sweep."
CODE_HINT = (
    "# Map a dataset and choose what to vary; the Python that starts the sweep appears here."
)
MODES = ("One run", "Sweep")


def resolve_sweep(ref: str | None, runs_dir: Path) -> Path:
    """The record a page names (its id, or its path) in `runs_dir`/sweeps/; raises
    OutsideFolderError (a ValueError) for one outside, FileNotFoundError for none there."""
    return record_watch.resolve(ref, runs_dir / files.SWEEPS_DIR, "sweep", dragon.open_sweep)


def choices(runs_dir: Path) -> list[tuple[str, str]]:
    """Every sweep, newest first, as (label, record path)."""
    return [(sweep_view.choice_label(row), row["path"]) for row in dragon.list_sweeps(runs_dir)]


# ---- the code ----------------------------------------------------------------------------------


def _code(path: Path) -> str:
    try:
        return present.portable_code(dragon.code(path))
    except (ValueError, TypeError, OSError) as e:
        return comment_lines(f"The code cannot be written for this sweep: {e}")


# ---- start, preview ----------------------------------------------------------------------------


def _arguments(read_spec: Callable[..., dragon.RunSpec], sweep: Mapping[str, Any],
               runs_dir: Path, values: Mapping[str, Any]) -> dict[str, Any]:  # fmt: skip
    """The widgets' values -> `dragon.sweep`'s arguments (spec, space, ...)."""
    spec = read_spec(**values, runs_dir=runs_dir)
    objective = (sweep["objective"] or "").strip() or "eval_loss"
    return {"spec": spec, "space": sweep_form.read_space(sweep["rows"], spec.method),
            "sampler": sweep["sampler"], "n_trials": sweep_form.read_trials(sweep["trials"]),
            "objective": objective,
            "judge": sweep_form.read_judge(objective, sweep.get("judge") or {}, runs_dir),
            "prune": sweep_form.read_prune(sweep.get("prune")),
            "seed": sweep_form.read_seed(sweep.get("seed")),
            "name": (values.get("name") or "").strip() or "sweep"}  # fmt: skip


def start_sweep(
    read_spec: Callable[..., dragon.RunSpec], sweep: Mapping[str, Any], *, runs_dir: Path,
    profile: Profile | None = None, **values: Any,
) -> tuple[Any, ...]:  # fmt: skip
    """Start sweep -> (picker, what started, code, error box); returns once its job is
    spawned. A refusal leaves everything as it was, with nothing queued."""
    try:
        if profile and (over := queue_panel.cap_refusal(profile, runs_dir)):
            raise RuntimeError(over)
        args = _arguments(read_spec, sweep, runs_dir, values)
        s = dragon.sweep(**args, runs_dir=runs_dir)
    except ERRORS as e:
        watch.warn(str(e))
        return gr.skip(), gr.skip(), gr.skip(), present.error_html(str(e))
    picked = gr.update(choices=choices(runs_dir), value=str(s.path))
    started = f"Started sweep **`{s.id}`**: its trials are below, and ranked in Compare."
    return picked, started, _code(s.path), ""


def preview(read_spec: Callable[..., dragon.RunSpec], mode: str, sweep: Mapping[str, Any], *,
            runs_dir: Path, **values: Any) -> tuple[Any, Any]:  # fmt: skip
    """A widget changed -> (code, objective choices) while the Sweep choice is shown; a value
    the sweep would refuse shows the hint (Start sweep says what is wrong)."""
    if mode != "Sweep":
        return gr.skip(), gr.skip()
    try:
        spec = read_spec(**values, runs_dir=runs_dir)
    except ERRORS:
        return CODE_HINT, gr.skip()
    objectives = sweep_form.objective_choices(spec)
    current = (sweep["objective"] or "").strip()
    # A typed objective (metric_<name>) stays: Start sweep says if the method lacks it.
    picker = gr.update(choices=objectives, value=current or objectives[0])
    try:
        args = _arguments(read_spec, sweep, runs_dir, values)
    except ERRORS as e:
        return comment_lines(f"Start sweep cannot run yet: {e}"), picker
    return sweep_view.preview_code(**args, runs_dir=runs_dir), picker


# ---- the watch ---------------------------------------------------------------------------------


def _version(path: Path) -> Any:
    """Changes whenever the record is written (after every trial's report and state)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def _empty(message: str, seen: Seen, error: str = "") -> tuple[Any, ...]:
    off = gr.update(interactive=False)
    table = pd.DataFrame(columns=["trial", "state"])
    return message, table, "", off, off, present.error_html(error), seen


def show(ref: str | None, message: str = "", *, runs_dir: Path) -> tuple[Any, ...]:
    """Read a sweep -> (header, trials, log, cancel, resume, error, seen)."""
    if not ref:
        return _empty(present.hint_html(NO_SWEEP), record_watch.seen(None))
    try:
        path = resolve_sweep(ref, runs_dir)
    except ValueError as e:  # outside the sweeps folder, or blank
        return _empty(present.hint_html(NO_SWEEP), record_watch.seen(ref), str(e))
    except FileNotFoundError as e:
        return _empty(present.hint_html(str(e)), record_watch.seen(ref))
    version = _version(path)  # before reading: a write during the read shows next tick
    s = dragon.open_sweep(path)
    record = s.status()  # a sweep whose process died is reported failed here
    status = record.get("status")
    return (
        sweep_view.header_markdown(record, datetime.now(UTC)),
        sweep_view.progress_table(record),
        "\n".join(s.logs(LOG_LINES)),
        *record_watch.buttons(status),
        present.error_html(message),
        record_watch.seen(ref, version, status),
    )


def tick(ref: str | None, seen: Seen | None, *, runs_dir: Path) -> tuple[Any, ...]:
    """Timer tick: read the sweep only when it changed, or it is active and due a look."""
    if record_watch.unchanged(ref, seen, lambda r: _version(resolve_sweep(r, runs_dir))):
        return (gr.skip(),) * 7
    return show(ref, runs_dir=runs_dir)


def cancel(ref: str | None, *, runs_dir: Path) -> tuple[Any, ...]:
    """Cancel: asks the sweep to stop (the trial training keeps a checkpoint); returns at once."""
    return record_watch.then_show(
        lambda: dragon.sweep_cancel(resolve_sweep(ref, runs_dir), wait=False),
        partial(show, runs_dir=runs_dir), ref,
    )  # fmt: skip


def resume(ref: str | None, *, runs_dir: Path) -> tuple[Any, ...]:
    """Resume a failed or cancelled sweep from the trial it was training, in the background."""
    return record_watch.then_show(
        lambda: dragon.resume_sweep(resolve_sweep(ref, runs_dir)),
        partial(show, runs_dir=runs_dir), ref, toast=True,
    )  # fmt: skip


def refresh_choices(runs_dir: Path, seen: Any, current: str | None) -> tuple[Any, Any]:
    """Timer tick -> (picker update, version seen): new sweeps appear; with none picked, the
    newest is shown (so a reloaded page reattaches). Reads nothing while none changed."""
    home = runs_dir / files.SWEEPS_DIR
    return record_watch.refresh_choices(home, seen, current, partial(choices, runs_dir))


def switch(mode: str, n_single: int = 1) -> tuple[Any, ...]:
    """One run or Sweep -> (the sweep's box, the sweep's timer, then each of the one run's
    `n_single` widgets: Start's row, its code)."""
    sweeping = mode == "Sweep"
    one = gr.update(visible=not sweeping)
    return gr.update(visible=sweeping), gr.Timer(active=sweeping), *(one,) * n_single


def _widgets(method: str, runs_dir: Path | None) -> dict[str, Any]:
    """The sweep's box, by name: its form, Start sweep, then the watch."""
    w: dict[str, Any] = {"form": sweep_form.form_widgets(method, runs_dir)}
    w["start"] = gr.Button("Start sweep", variant="primary", elem_id="sweep-start")
    w["started"] = gr.Markdown(elem_id="sweep-started")
    w["error"] = gr.HTML(elem_id="sweep-error")
    with gr.Row():
        w["picker"] = gr.Dropdown([], value=None, label="Sweep", scale=4,
                                  allow_custom_value=True,  # each pick is checked
                                  elem_id="sweep-picker")  # fmt: skip
        w["cancel"] = gr.Button("Cancel", interactive=False, scale=1, elem_id="sweep-cancel")
        w["resume"] = gr.Button("Resume", interactive=False, scale=1, elem_id="sweep-resume")
    w["header"] = gr.Markdown(present.hint_html(NO_SWEEP), elem_id="sweep-header")
    w["trials"] = gr.Dataframe(pd.DataFrame(columns=["trial", "state"]), label="Trials",
                               interactive=False, wrap=True, elem_id="sweep-trials")  # fmt: skip
    w["log"] = gr.Textbox(label=f"Log (last {LOG_LINES} lines)", lines=5, max_lines=5,
                          autoscroll=True, interactive=False, elem_id="sweep-log")  # fmt: skip
    w["code"] = gr.Code(CODE_HINT, language="python", label="Python", interactive=False,
                        show_line_numbers=False, elem_id="sweep-code")  # fmt: skip
    return w


def place(runs_dir: Path | None = None) -> tuple[Any, dict[str, Any]]:
    """The sweep's box (hidden until the Sweep choice), and its widgets by name; with the runs
    dir, the judge's measured agreement shows beside it."""
    with gr.Group(visible=False, elem_id="sweep-box") as box:
        w = _widgets("sft", runs_dir)
    return box, w


def picked_code(ref: str | None, *, runs_dir: Path) -> Any:
    """A sweep picked -> its code."""
    try:
        return _code(resolve_sweep(ref, runs_dir))
    except (FileNotFoundError, ValueError):
        return gr.skip()


def wire(ctx: AppContext, box: Any, w: dict[str, Any], form: named.Form,
         read_spec: Callable[..., dragon.RunSpec], mode: Any, single: list[Any]) -> None:  # fmt: skip
    """The sweep's events: `form` is Start's widgets, by name; `mode` shows the box in place
    of the one run's widgets `single` (Start's row, its code)."""
    inside = ctx.runs_dir  # every handler resolves what the page names in it
    timer = gr.Timer(TICK_S, active=False)  # ticks only while the Sweep choice is shown
    seen = gr.State(None)
    view = [w[k] for k in ("header", "trials", "log", "cancel", "resume", "error")] + [seen]
    quiet: dict[str, Any] = {"show_progress": "hidden"}
    mode.change(partial(switch, n_single=len(single)), mode, [box, timer, *single])
    rows = w["form"]["rows"]
    pickers = {"method": form["method"], "pickers": {i: r["setting"] for i, r in rows.items()}}
    form["method"].change(named.handler(sweep_form.follow_method, pickers),
                          named.inputs(pickers), named.components(pickers["pickers"]))  # fmt: skip
    full = {**form, "sweep": w["form"]}
    w["start"].click(
        named.handler(partial(start_sweep, read_spec, runs_dir=inside, profile=ctx.profile),
                      full),
        named.inputs(full),
        [w["picker"], w["started"], w["code"], w["error"]],
    )  # fmt: skip
    watched = {"mode": mode, **full}
    gr.on([c.change for c in named.components(watched)],
          named.handler(partial(preview, read_spec, runs_dir=inside), watched),
          named.inputs(watched), [w["code"], w["form"]["objective"]],
          trigger_mode="always_last", **quiet)  # fmt: skip
    w["picker"].input(partial(picked_code, runs_dir=inside), w["picker"], w["code"])
    record_watch.wire(timer, w, view, seen, show=partial(show, runs_dir=inside),
                      tick=partial(tick, runs_dir=inside), refresh=partial(refresh_choices, inside),
                      cancel=partial(cancel, runs_dir=inside),
                      resume=partial(resume, runs_dir=inside))  # fmt: skip
