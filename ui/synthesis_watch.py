"""A synthesis job on a page: started, watched, its counts, kept rows and code shown.

The Data tab's Synthesize (`ui.synthesize_panel`) and the Feedback tab's pairs
(`ui.pairs_panel`) both run as background jobs (`dragon.start_synthesis` through `batches/jobs.py`):
the handler returns at once and a `gr.Timer`, active only while a job runs, shows its progress,
then the counts kept and dropped per reason, a preview of the kept rows and the code. What was
kept becomes the mapped dataset the Train tab trains on.

    widgets = job_widgets("synth", "Synthesize", "Kept rows (first 10)", SYNTH_HINT)
    wire(ctx, widgets, run_picker, start, inputs)     # outside the accordion
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.data.codegen import literal, runs_dir_argument
from dragonfarm_core.rundir import refs
from ui import named, present, watch
from ui.context import AppContext

TICK_S = 1.0
CANCEL_TIMEOUT_S = 10.0
PREVIEW_N = 10
ACTIVE = ("queued", "running")
ERRORS = (ValueError, TypeError, OSError, RuntimeError, dragon.DatasetError)


def counts_markdown(record: dict[str, Any]) -> str:
    """Kept of how many, where it went, and one line per reason rows were dropped."""
    lines = [f"**Kept {record['kept']} of {record['in']} prompts.**"]
    if record.get("file"):
        lines[0] += f" Written to `{record['file']}`."
    dropped = [(k, n) for k, n in record["dropped"].items() if n]
    if dropped:
        reasons = record.get("reasons") or {}
        lines += ["", "| dropped | rows | why |", "|---|---:|---|"]
        lines += [f"| {k.replace('_', ' ')} | {n} | {reasons.get(k, '')} |" for k, n in dropped]
    samples = record.get("samples")
    if samples and samples.get("asked"):
        bad = ", ".join(f"{samples[k]} {k}" for k in ("refusal", "empty", "error") if samples[k])
        lines += ["", f"Samples: {samples['asked']} asked, {samples['ok']} usable"
                  + (f" ({bad})." if bad else ".")]  # fmt: skip
    return "\n".join(lines)


@dataclass(frozen=True)
class Watching:
    """The job this page waits for, the code it shows, and what it does with the result."""

    job: Any
    code: str
    split: tuple[float, int] | None = None  # the mapped data's split, carried over
    told: str = ""


def view(
    mapped: Any = None,
    counts: Any = None,
    error: str = "",
    preview: Any = None,
    code: Any = None,
    watching: Watching | None = None,
) -> tuple[Any, ...]:
    """(mapped dataset, counts, error, preview, code, start button, cancel button, timer,
    watching); None leaves an output as it is."""
    keep = gr.skip()
    stop, go, timer = watch.job_buttons(watching is not None)
    return (
        keep if mapped is None else mapped,
        keep if counts is None else counts,
        present.error_html(error),
        keep if preview is None else preview,
        keep if code is None else code,
        go,
        stop,
        timer,
        watching,
    )


def refused(message: str) -> tuple[Any, ...]:
    """A start that was refused: the message, in a toast and under the button."""
    watch.warn(message)
    return view(error=message)


def _progress(watching: Watching) -> tuple[Any, ...]:
    state = watching.job.state or "queued"
    row = watching.job.progress()
    step = f": {row['stage']} {row['done']}/{row['total']}" if row else ""
    waiting = "queued, waiting for the device" if state == "queued" else state
    text = f"Synthesis {waiting}{step}…"
    return view(counts=text, code=watching.code, watching=watching)


def _finished(watching: Watching) -> tuple[Any, ...]:
    try:
        ds = watching.job.result()
    except dragon.SynthesisError as e:
        return view(counts=counts_markdown(e.synthesis), error=str(e))
    except ERRORS as e:
        return view(counts="", error=str(e))
    if watching.split is not None:
        ds = ds.split(*watching.split)
    counts = counts_markdown(ds.synthesis or {}) + "\n\n" + watching.told
    return view(ds, counts, "", present.table_preview(ds.frame, PREVIEW_N), watching.code)


def tick(watching: Watching | None) -> tuple[Any, ...]:
    """Timer tick: the job's progress while it runs, then its result."""
    if watching is None:
        return (gr.skip(),) * 9
    if watching.job.state in ACTIVE:
        return _progress(watching)
    return _finished(watching)


def cancel(watching: Watching | None) -> tuple[Any, ...]:
    """Cancel: the job stops between requests and writes nothing."""
    if watching is None:
        return view()
    watching.job.cancel(CANCEL_TIMEOUT_S)
    return view(counts="Cancelled: nothing was written.", code=watching.code)


def started(job: Any, code: str, split: tuple[float, int] | None, told: str) -> tuple[Any, ...]:
    return _progress(Watching(job, code, split, told))


def refresh_runs(runs_dir: Path, seen: int | None, current: str | None) -> tuple[Any, Any]:
    return watch.refresh_picker(runs_dir, seen, current, watch.succeeded_runs, lambda values: None)


def run_prompts(run: str | None, split: str, n: float | None, runs_dir: Path) -> list[str]:
    """A run's user turns (all, or `n` chosen with the default seed)."""
    if not run:
        raise ValueError("Pick a run whose prompts to use.")
    folder = refs.resolve_run(run, runs_dir)  # refuses a run outside the app's runs folder
    found = dragon.prompts(folder, split, int(n) if n else None)
    if not found:
        raise ValueError(f"Run {folder.name} has no {split} rows; pick the other split.")
    return found


def prompts_code(run: str, split: str, n: float | None) -> str:
    count = f", n={int(n)}" if n else ""
    return f"prompts = dragon.prompts(dragon.open_run({literal(run)}), {literal(split)}{count})"


def runs_dir_expression(runs_dir: Path) -> dict[str, str]:
    """{"runs_dir": its expression} when the code must name the app's runs dir, else {}."""
    home = runs_dir_argument(runs_dir)
    return {"runs_dir": home.split("=", 1)[1]} if home else {}


@dataclass(frozen=True)
class JobWidgets:
    """The buttons and outputs under a synthesis form."""

    go: gr.Button
    stop: gr.Button
    error: gr.HTML
    counts: gr.Markdown
    preview: gr.Dataframe
    code: gr.Code


def job_widgets(prefix: str, start: str, preview: str, hint: str) -> JobWidgets:
    """Start and Cancel, then the error, the counts, the kept rows and the code panel."""
    with gr.Row():
        go = gr.Button(start, variant="primary", scale=4, elem_id=f"{prefix}-go")
        stop = gr.Button("Cancel", interactive=False, scale=1, elem_id=f"{prefix}-cancel")
    error = gr.HTML(elem_id=f"{prefix}-error")
    counts = gr.Markdown(elem_id=f"{prefix}-counts")
    table = gr.Dataframe(label=preview, interactive=False, wrap=True,
                         elem_id=f"{prefix}-preview")  # fmt: skip
    code = gr.Code(hint, language="python", label="Python", interactive=False,
                   show_line_numbers=False, elem_id=f"{prefix}-code")  # fmt: skip
    return JobWidgets(go, stop, error, counts, table, code)


def wire(
    ctx: AppContext,
    w: JobWidgets,
    run: gr.Dropdown,
    start: Callable[..., tuple[Any, ...]],
    form: named.Form,
) -> None:
    """The job's state and timer; the run picker's refresh, Start (`start(runs_dir=, ...)`,
    each of `form`'s values by its name), the timer's ticks and Cancel, all showing `view`'s
    outputs."""
    watching, seen = gr.State(None), gr.State(None)
    timer = gr.Timer(TICK_S, active=False)
    run.focus(partial(refresh_runs, ctx.runs_dir), [seen, run], [run, seen])
    outputs = [ctx.mapped, w.counts, w.error, w.preview, w.code, w.go, w.stop, timer, watching]
    w.go.click(named.handler(partial(start, runs_dir=ctx.runs_dir), form), named.inputs(form),
               outputs)  # fmt: skip
    watch.wire_job(timer, w.stop, watching, outputs, tick, cancel)
