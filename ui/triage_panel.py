"""The Monitor's "what went wrong" panel for a failed run: the kind of failure in words
(`dragon.triage`) and one button per fix; a button starts the fixed run (`dragon.retry`) next to
the failed one, which becomes the selected run, or resumes the run when that is the fix.

    panel = triage_panel.build()          # inside the Monitor's layout
    triage_panel.wire(panel, picker, ctx.run, runs_dir, [header.change])
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.rundir import refs

MAX_FIXES = 4  # buttons built once; a failure shows as many as it has fixes


@dataclass(frozen=True)
class Panel:
    text: gr.HTML
    buttons: tuple[gr.Button, ...]


def build() -> Panel:
    text = gr.HTML(elem_id="monitor-triage")
    with gr.Row():
        buttons = tuple(
            gr.Button(visible=False, size="sm", elem_id=f"monitor-fix-{i}")
            for i in range(MAX_FIXES)
        )
    return Panel(text, buttons)


def view(run_dir: str | None, runs_dir: Path) -> tuple[Any, ...]:
    """(the panel's text, each button's update) for the picked run: hidden unless it failed."""
    hidden = ("", *(gr.update(visible=False) for _ in range(MAX_FIXES)))
    if not run_dir:
        return hidden
    try:
        found = dragon.triage(refs.resolve_run(run_dir, runs_dir))
    except (FileNotFoundError, ValueError):
        return hidden
    if found is None:
        return hidden
    offer = " Try one of these:" if found.fixes else ""
    text = (
        f"<div class='df-hint' id='monitor-triage-kind' data-kind='{found.kind}'><strong>What "
        f"went wrong:</strong> {html.escape(found.explanation)}{offer}</div>"
    )
    labels = [f.label for f in found.fixes[:MAX_FIXES]]
    updates = [gr.update(value=label, visible=True) for label in labels]
    updates += [gr.update(visible=False)] * (MAX_FIXES - len(labels))
    return (text, *updates)


def apply(run_dir: str | None, index: int, runs_dir: Path) -> tuple[Any, str]:
    """A fix button -> (the run to select, a message): the fixed run started, or resumed."""
    if not run_dir:
        return gr.skip(), ""
    try:
        run = refs.resolve_run(run_dir, runs_dir)
        found = dragon.triage(run)
        if found is None or index >= len(found.fixes):
            return gr.skip(), "That run has nothing to fix any more; pick it again."
        fix = found.fixes[index]
        started = dragon.retry(run, fix)
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        gr.Warning(html.escape(str(e)))
        return gr.skip(), f"<div class='df-error'>{html.escape(str(e))}</div>"
    what = "Resumed" if fix.action == "resume" else f"Started run {started.id} with"
    return str(
        started.dir
    ), f"<div class='df-hint'>{html.escape(what)}: {html.escape(fix.label)}.</div>"


def wire(
    panel: Panel, picked: Any, selected: gr.State, runs_dir: Path, triggers: list[Any]
) -> None:
    """Show the panel for the `picked` run whenever it or `triggers` (the Monitor's view of the
    run's state) change; a button applies its fix and makes the fixed run the `selected` one."""
    shown = partial(view, runs_dir=runs_dir)
    gr.on([picked.change, *triggers], shown, picked, [panel.text, *panel.buttons])
    for i, button in enumerate(panel.buttons):
        button.click(partial(apply, index=i, runs_dir=runs_dir), picked, [selected, panel.text])
