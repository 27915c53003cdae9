"""The Evaluate tab: a finished run's held-out measurements, its sample replies, and metrics.

One call of `dragon.evaluate`: it reads what training wrote at its end (eval.json and
samples.json), or measures again with the saved adapter when asked or when more samples are
wanted than were written (in a subprocess: this process never loads a model). Chosen metrics
score the sample replies and are stored in the run, so the means stay with it. The picked run
is resolved in the app's runs dir (`refs.resolve_run`): one outside it is refused, not evaluated.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.data.codegen import literal
from dragonfarm_core.rundir import refs
from ui import present, watch
from ui.context import AppContext

TITLE = "Evaluate"
FINISHED = ("succeeded", "cancelled", "failed")
CODE_HINT = "# Pick a finished run; the Python that evaluates it appears here."
NO_RUN = "Pick a finished run (it is listed once its training has ended)."
EVALUATE_ERRORS = (ValueError, TypeError, OSError, RuntimeError)


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
    choices = run_choices(runs_dir)
    if wanted not in [value for _, value in choices]:
        return gr.skip()
    return gr.update(choices=choices, value=wanted)


def chosen_metrics(names: Sequence[str] | None, pattern: str | None) -> list[Any] | None:
    """The metrics to pass: the ticked names, then a regex metric; None when there are none
    (evaluate then returns the means stored earlier)."""
    metrics: list[Any] = list(names or [])
    if (pattern or "").strip():
        metrics.append(dragon.metric_regex(pattern.strip()))
    return metrics or None


def evaluate_code(
    run_dir: str, n_samples: int, recompute: bool, names: Sequence[str], pattern: str | None
) -> str:
    """The Python of the same evaluation."""
    arguments = [literal(run_dir), f"n_samples={n_samples}"]
    arguments += ["recompute=True"] if recompute else []
    metrics = [literal(name) for name in names or []]
    if (pattern or "").strip():
        metrics.append(f"dragon.metric_regex({literal(pattern.strip())})")
    arguments += [f"metrics=[{', '.join(metrics)}]"] if metrics else []
    body = f"ev = dragon.evaluate({', '.join(arguments)})\nprint(ev)\nprint(ev.samples)\n"
    return present.python_code(body)


def run_evaluation(
    run_dir: str | None,
    names: Sequence[str] | None,
    pattern: str | None,
    n_samples: float | None,
    recompute: bool,
    *,
    runs_dir: Path,
) -> tuple[Any, ...]:
    """Evaluate -> (summary, measures table, metrics table, samples table, code, error box)."""
    try:
        if not run_dir:
            raise ValueError(NO_RUN)
        run_dir = str(refs.resolve_run(run_dir, runs_dir))  # refuses a run outside runs_dir
        if n_samples is None:
            raise ValueError("Samples is empty; enter how many sample replies to show.")
        n = int(n_samples)
        ev = dragon.evaluate(run_dir, n_samples=n, recompute=recompute,
                             metrics=chosen_metrics(names, pattern))  # fmt: skip
    except EVALUATE_ERRORS as e:
        gr.Warning(html.escape(str(e).splitlines()[0]))
        return (gr.skip(),) * 5 + (present.error_html(str(e)),)
    how = "measured again with the saved adapter" if ev.recomputed else "as training wrote it"
    summary = f"**Run `{ev.run_id}`** ({ev.method.upper()}): {len(ev.samples)} samples, {how}."
    metrics = gr.update(value=present.metrics_table(ev.metrics), visible=bool(ev.metrics))
    return (
        summary,
        gr.update(value=present.evaluation_table(ev.results), visible=True),
        metrics,
        gr.update(value=ev.samples, visible=True),
        evaluate_code(run_dir, n, recompute, names or [], pattern),
        "",
    )


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
    go = gr.Button("Evaluate", variant="primary", elem_id="evaluate-go")
    error = gr.HTML(elem_id="evaluate-error")
    summary = gr.Markdown(present.hint_html(NO_RUN), elem_id="evaluate-summary")
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
    seen = gr.State(None)

    go.click(
        partial(run_evaluation, runs_dir=ctx.runs_dir),
        [picker, names, pattern, n_samples, recompute],
        [summary, measures, metrics, samples, code, error],
    )
    picker.focus(partial(refresh_runs, ctx.runs_dir), [seen, picker], [picker, seen])
    ctx.run.change(partial(select, ctx.runs_dir), ctx.run, picker)
