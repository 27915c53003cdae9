"""The Export tab's llama.cpp line: whether GGUF export can run on this machine, and a Build
button that builds llama.cpp when it cannot.

GGUF export and its check run llama.cpp's converter and binaries (`dragonfarm_core.llamacpp.location`).
A pip install has none: Build is `llama_cpp_job.start_build`, the same build as `dragonfarm
build-llama-cpp` as a background job (about 10 minutes on 2 cores, once per machine), and the
handler returns at once. A `gr.Timer`, active only while the build runs, shows its progress
(compile steps from its log) and the log's last lines, with a Cancel; a build started elsewhere
(another browser, the command line's job) is joined, not started twice. The status line is read
again on every page load, and Export GGUF looks for llama.cpp on every click, so once the build
has succeeded it works without a restart.
"""

from __future__ import annotations

import time
from typing import Any

import gradio as gr

from dragonfarm_core.llamacpp import location as llama_cpp
from dragonfarm_core.llamacpp.build import LlamaCppBuildError
from dragonfarm_core.llamacpp.job import BuildJob, active_build, start_build
from dragonfarm_core.rundir import files
from ui import present, watch

TICK_S = 2.0
LOG_LINES = 12
CANCEL_TIMEOUT_S = 10.0
ERRORS = (LlamaCppBuildError, OSError, RuntimeError, ValueError)
MISSING = (
    "**llama.cpp is not built on this machine**: Export GGUF needs it. Press **Build llama.cpp** "
    "to build it here, once (about 10 minutes on 2 cores), or run `dragonfarm build-llama-cpp`."
)


def status_text() -> str:
    """What the line says when the page loads: llama.cpp ready (where), being built, or not."""
    facts = llama_cpp.describe()
    if facts["available"]:
        return (
            f"llama.cpp is ready (`{facts['root']}`, from {facts['found_by']}): Export GGUF works."
        )
    running = active_build()
    if running is not None:
        return _progress_text(running, running.job.status())
    return MISSING


def _progress_text(pending: BuildJob, status: dict[str, Any]) -> str:
    state = status.get("state") or "queued"
    since = _epoch(status.get("started_at") or status.get("queued_at"))
    took = ""
    if since is not None:
        seconds = int(time.time() - since)
        took = f", {seconds} s so far" if seconds < 120 else f", {seconds // 60} min so far"
    steps = pending.progress()
    doing = f"compiling, step {steps[0]} of {steps[1]}" if steps else f"{state}, preparing"
    return f"**Building llama.cpp** ({doing}{took})… It takes about 10 minutes on 2 cores."


def _epoch(value: Any) -> float | None:
    parsed = files.parse_iso(value)
    return parsed.timestamp() if parsed is not None else None


def _view(
    status: Any = None, error: str = "", log: Any = None, pending: BuildJob | None = None
) -> tuple[Any, ...]:
    """(status, error, log, cancel, build, timer, pending); None leaves the status as it is."""
    return (
        gr.skip() if status is None else status,
        present.error_html(error),
        gr.update(visible=False) if log is None else gr.update(value=log, visible=True),
        *watch.job_buttons(pending is not None),
        pending,
    )


def _shown(pending: BuildJob) -> tuple[Any, ...]:
    """The view of a build: its progress while it runs, its outcome once it ended."""
    status = pending.job.status()
    log = "\n".join(pending.logs(LOG_LINES))
    if status.get("state") in ("queued", "running"):
        return _view(_progress_text(pending, status), log=log, pending=pending)
    try:
        where = pending.wait(0)
    except (*ERRORS, TimeoutError) as e:
        watch.warn(str(e))
        return _view(MISSING, error=str(e), log=log)
    return _view(f"llama.cpp is ready (`{where}`): Export GGUF works now.", log=log)


def build_now() -> tuple[Any, ...]:
    """Build: start the build (or join the one under way) and return at once."""
    try:
        pending = start_build()
    except ERRORS as e:
        watch.warn(str(e))
        return _view(error=str(e))
    return _shown(pending)


def tick(pending: BuildJob | None) -> tuple[Any, ...]:
    """Timer tick: the build's progress, or its outcome once it ended."""
    return (gr.skip(),) * 7 if pending is None else _shown(pending)


def cancel(pending: BuildJob | None) -> tuple[Any, ...]:
    """Cancel: the build stops; built so far is kept, and Build resumes it."""
    if pending is None:
        return _view()
    pending.cancel(timeout=CANCEL_TIMEOUT_S)
    return _shown(pending)


def build() -> None:
    """The line, its Build and Cancel buttons and the build's log, wired."""
    with gr.Row():
        status = gr.Markdown(status_text, elem_id="export-llama-status")  # read at each load
        go = gr.Button("Build llama.cpp", scale=0, min_width=200, elem_id="export-llama-build")
        stop = gr.Button("Cancel", interactive=False, scale=0, min_width=100,
                         elem_id="export-llama-cancel")  # fmt: skip
    error = gr.HTML(elem_id="export-llama-error")
    log = gr.Textbox(label=f"llama.cpp build log (last {LOG_LINES} lines)", lines=6, max_lines=6,
                     autoscroll=True, interactive=False, visible=False,
                     elem_id="export-llama-log")  # fmt: skip
    pending = gr.State(None)
    timer = gr.Timer(TICK_S, active=False)  # ticks only while a build runs
    view = [status, error, log, stop, go, timer, pending]
    go.click(build_now, None, view)
    watch.wire_job(timer, stop, pending, view, tick, cancel)
