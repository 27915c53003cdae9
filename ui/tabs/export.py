"""The Export tab: take a finished run's model out: merge, GGUF, Ollama, the Hub.

Each step is a background job of the job runner (this process never loads a model, and a step
outlives the page): Merge is `dragon.start_merge`, GGUF `dragon.start_export_gguf` (llama.cpp,
then the template round-trip check), Ollama `dragon.start_serve_ollama` (merged and exported
first when needed), Publish `dragon.start_publish` (the token typed here, else HF_TOKEN or the
login cache, reaches the job on its standard input only; the field is emptied once the job
has it). One step runs at a time on a page. The page watches it like the Evaluate tab watches
a recompute: a `gr.Timer`, active only while a job runs, reads the job when the run's change
counter (`ui.watch`) moved or every LIVENESS_S; it shows the job's state and log and a
Cancel. Under the steps, `ui.llama_cpp_panel` says whether llama.cpp (which GGUF export needs)
is built here, with a button that builds it. Below: the files the run's exports wrote with their
sizes, every check's verdict (the merge's greedy tokens, the GGUF's template round trip, the
Ollama template's), and the Python of the step. The picked run is resolved in the app's runs dir (`refs.resolve_run`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.codegen.run import export_code
from dragonfarm_core.export.summary import ExportSummary, summary
from dragonfarm_core.rundir import files, refs
from ui import llama_cpp_panel, present, watch
from ui.context import AppContext
from ui.export_view import checks_markdown, files_table

TITLE = "Export"
TICK_S = 1.0
LIVENESS_S = 10.0
LOG_LINES = 20
CANCEL_TIMEOUT_S = 10.0
ACTIVE = ("queued", "running")
QUANTS = ["q8_0", "f16", "bf16", "q4_k_m", "q5_k_m", "q6_k"]
OLLAMA_URL = "http://localhost:11434"
# The running step's Cancel, under the llama.cpp line whose build has a Cancel of its own: two
# buttons both saying "Cancel" left a new user guessing which one stops what.
STOP = "Cancel the running step"
NO_RUN = "Pick a run that has succeeded: its model can then be merged, exported and published."
ERRORS = (ValueError, TypeError, OSError, RuntimeError, LookupError)
DOING = {"merge": "Merging", "gguf": "Exporting to GGUF", "ollama": "Registering with Ollama",
         "publish": "Publishing"}  # fmt: skip
WAITING = {"queued": "queued, waiting for the device", "running": "running"}
VIEW_SIZE = 14


@dataclass(frozen=True)
class Watching:
    """The step this page is waiting for: which, its job, its code, what the page last read."""

    step: str
    run: Path
    pending: Any  # MergeJob, GGUFJob or ExportJob: .job, .logs(), .cancel(), .wait()
    code: str
    version: int | None
    read_at: float


# Succeeded runs, newest first, as (label, run folder): only their models can be exported.
run_choices = watch.succeeded_runs


def refresh_runs(runs_dir: Path, seen: int | None, current: str | None) -> tuple[Any, Any]:
    return watch.refresh_picker(runs_dir, seen, current, run_choices, lambda values: None)


def select(runs_dir: Path, wanted: str | None) -> Any:
    """The run selected elsewhere is picked here too once it has succeeded."""
    return watch.select_run(runs_dir, wanted, run_choices)


# --- the view -----------------------------------------------------------------------------------


def _view(
    status: Any = None,
    error: str = "",
    log: Any = None,
    outputs: ExportSummary | None = None,
    code: Any = None,
    watching: Watching | None = None,
    token: Any = None,
) -> tuple[Any, ...]:
    """(status, error, log, files, checks, code, cancel, merge, gguf, ollama, publish, token,
    timer, watching); None leaves an output as it is."""
    keep = gr.skip()
    active = watching is not None
    buttons = (gr.update(interactive=not active),) * 4
    return (
        keep if status is None else status,
        present.error_html(error),
        gr.update(visible=False) if log is None else gr.update(value=log, visible=True),
        keep
        if outputs is None
        else gr.update(value=files_table(outputs), visible=bool(outputs.files)),
        keep if outputs is None else checks_markdown(outputs),
        keep if code is None else code,
        gr.update(interactive=active, value=STOP),
        *buttons,
        keep if token is None else token,
        gr.Timer(active=active),
        watching,
    )


def show(run_dir: str | None, w: Watching | None, *, runs_dir: Path) -> tuple[Any, ...]:
    """A run was picked: what its exports wrote, and the code of a merge. A step under way
    keeps its watch (and the buttons stay off until it ends)."""
    if w is not None:
        return (gr.skip(),) * VIEW_SIZE
    if not run_dir:
        return _view(present.hint_html(NO_RUN))
    try:
        path = refs.resolve_run(run_dir, runs_dir)
        s = summary(path)
    except ERRORS as e:
        return _view(error=str(e))
    return _view(f"**Run `{path.name}`**", outputs=s, code=export_code(path, "merge"))


def _epoch(value: Any) -> float | None:
    parsed = files.parse_iso(value)
    return parsed.timestamp() if parsed is not None else None


def _progress(w: Watching, status: dict[str, Any], token: Any = None) -> tuple[Any, ...]:
    state = status.get("state") or "queued"
    since = _epoch(status.get("started_at") or status.get("queued_at"))
    took = f" for {int(time.time() - since)} s" if since is not None else ""
    text = f"**{DOING[w.step]}** run `{w.run.name}`: {WAITING.get(state, state)}{took}…"
    log = "\n".join(w.pending.logs(LOG_LINES))
    return _view(text, log=log, code=w.code, watching=w, token=token)


def _finished(w: Watching) -> tuple[Any, ...]:
    """The view once the job ended: its outcome and what the run's exports now hold."""
    log = "\n".join(w.pending.logs(LOG_LINES))
    try:
        outcome = w.pending.wait(0)
    except (*ERRORS, TimeoutError) as e:
        watch.warn(str(e))
        return _view(present.hint_html(str(e).splitlines()[0]), error=str(e), log=log,
                     outputs=summary(w.run), code=w.code)  # fmt: skip
    done = f"**{DOING[w.step]}** run `{w.run.name}`: done."
    if isinstance(outcome, dict) and outcome.get("url") and w.step == "publish":
        done += f" [{outcome.get('repo')}]({outcome['url']})"
    elif isinstance(outcome, dict) and w.step == "ollama":
        done += f" Ollama serves it as `{outcome.get('name')}`."
    return _view(done, log=log, outputs=summary(w.run), code=w.code)


def start(
    step: str,
    run_dir: str | None,
    quant: str | None,
    name: str | None,
    url: str | None,
    repo: str | None,
    what: str | None,
    private: bool,
    token: str | None,
    *,
    runs_dir: Path,
) -> tuple[Any, ...]:
    """One of the four buttons: start its job and return at once (the timer watches it)."""
    cleared = gr.update(value="") if step == "publish" else None  # the token leaves the page
    try:
        if not run_dir:
            raise ValueError(NO_RUN)
        path = refs.resolve_run(run_dir, runs_dir)
        options: dict[str, Any] = {}
        if step == "merge":
            pending: Any = dragon.start_merge(path)
        elif step == "gguf":
            options = {"quant": quant or "q8_0"}
            pending = dragon.start_export_gguf(path, quant=options["quant"])
        elif step == "ollama":
            options = {
                "name": (name or "").strip() or None,
                "url": (url or "").strip() or OLLAMA_URL,
            }
            pending = dragon.start_serve_ollama(path, **options)
        else:
            if not (repo or "").strip():
                raise ValueError("Repo is empty: name the Hub repo, e.g. yourname/support-agent.")
            options = {"repo": repo.strip() if repo else "", "what": what or "merged",
                       "private": bool(private)}  # fmt: skip
            pending = dragon.start_publish(path, token=(token or "").strip() or None, **options)
    except ERRORS as e:
        watch.warn(str(e))
        return _view(error=str(e), token=cleared)
    w = Watching(step, path, pending, export_code(path, step, **options),
                 watch.run_version(path), time.monotonic())  # fmt: skip
    return _progress(w, pending.job.status(), token=cleared)


def tick(w: Watching | None) -> tuple[Any, ...]:
    """Timer tick: read the job only if the run's files changed, or every LIVENESS_S."""
    if w is None:
        return (gr.skip(),) * VIEW_SIZE
    version = watch.run_version(w.run)
    if version == w.version and time.monotonic() - w.read_at < LIVENESS_S:
        return (gr.skip(),) * VIEW_SIZE
    seen = Watching(w.step, w.run, w.pending, w.code, version, time.monotonic())
    status = w.pending.job.status()
    return _progress(seen, status) if status.get("state") in ACTIVE else _finished(seen)


def cancel(w: Watching | None) -> tuple[Any, ...]:
    if w is None:
        return _view()
    w.pending.cancel(timeout=CANCEL_TIMEOUT_S)
    return _finished(w)


def _steps() -> tuple[Any, ...]:
    """The four steps' columns: (merge, quant, gguf, name, url, ollama, repo, what, private,
    token, publish)."""
    with gr.Row():
        with gr.Column():
            gr.Markdown("**Merge**: a standalone model (plain transformers), checked.")
            merge = gr.Button("Merge", elem_id="export-merge")
        with gr.Column():
            quant = gr.Dropdown(QUANTS, value="q8_0", label="GGUF type", elem_id="export-quant",
                                info="f16/bf16 exact; q8_0 and below smaller, within a tolerance.")  # fmt: skip
            gguf = gr.Button("Export GGUF", elem_id="export-gguf")
        with gr.Column():
            name = gr.Textbox(label="Ollama model name", placeholder="default: the run's id",
                              elem_id="export-ollama-name")  # fmt: skip
            url = gr.Textbox(OLLAMA_URL, label="Ollama URL", elem_id="export-ollama-url")
            ollama = gr.Button("Register with Ollama", elem_id="export-ollama")
        with gr.Column():
            repo = gr.Textbox(label="Hub repo", placeholder="yourname/support-agent",
                              elem_id="export-repo")  # fmt: skip
            what = gr.Radio(["merged", "adapter"], value="merged", label="Publish",
                            elem_id="export-what")  # fmt: skip
            private = gr.Checkbox(False, label="Private repo", elem_id="export-private")
            token = gr.Textbox(label="Hugging Face token", type="password",
                               info="Optional: else HF_TOKEN or `hf auth login`. Never stored.",
                               elem_id="export-token")  # fmt: skip
            publish = gr.Button("Publish", variant="primary", elem_id="export-publish")
    return merge, quant, gguf, name, url, ollama, repo, what, private, token, publish


def build(ctx: AppContext) -> None:
    picker = gr.Dropdown([], value=None, label="Run", allow_custom_value=True,
                         info="Runs that have succeeded; open the list to refresh it.",
                         elem_id="export-run")  # fmt: skip
    merge, quant, gguf, name, url, ollama, repo, what, private, token, publish = _steps()
    llama_cpp_panel.build()  # whether GGUF export can run here; Build when it cannot
    stop = gr.Button(STOP, interactive=False, elem_id="export-cancel")
    error = gr.HTML(elem_id="export-error")
    status = gr.Markdown(present.hint_html(NO_RUN), elem_id="export-status")
    log = gr.Textbox(label=f"Log (last {LOG_LINES} lines)", lines=6, max_lines=6, autoscroll=True,
                     interactive=False, visible=False, elem_id="export-log")  # fmt: skip
    checks = gr.Markdown(elem_id="export-checks")
    written = gr.Dataframe(label="Files written", interactive=False, visible=False,
                           elem_id="export-files")  # fmt: skip
    code = gr.Code(language="python", label="Python", interactive=False,
                   show_line_numbers=False, elem_id="export-code")  # fmt: skip
    seen, watching = gr.State(None), gr.State(None)
    timer = gr.Timer(TICK_S, active=False)

    view = [status, error, log, written, checks, code, stop, merge, gguf, ollama, publish, token,
            timer, watching]  # fmt: skip
    inputs = [picker, quant, name, url, repo, what, private, token]
    for button, step in (
        (merge, "merge"),
        (gguf, "gguf"),
        (ollama, "ollama"),
        (publish, "publish"),
    ):
        button.click(partial(start, step, runs_dir=ctx.runs_dir), inputs, view)
    watch.wire_job(timer, stop, watching, view, tick, cancel)
    picker.change(partial(show, runs_dir=ctx.runs_dir), [picker, watching], view)
    picker.focus(partial(refresh_runs, ctx.runs_dir), [seen, picker], [picker, seen])
    ctx.run.change(partial(select, ctx.runs_dir), ctx.run, picker)
