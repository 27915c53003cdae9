"""The Runs tab's Lineage: the picked run's `dragon.lineage` as a picture (`ui.lineage_chart`)
with its nodes listed under it, and a picker that opens a node: a run is selected in the Runs
tab (and the Monitor), its own lineage drawn; an archived run is picked under Archived runs; a
file's path is shown. The code panel shows the `dragon.lineage(...)` call.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.codegen.lineage import lineage_code
from dragonfarm_core.rundir import refs
from ui import lineage_chart, present
from ui.context import AppContext


@dataclass(frozen=True)
class LineageWidgets:
    button: gr.Button
    plot: gr.Plot
    nodes: gr.HTML
    opener: gr.Dropdown
    shown: gr.State  # the Lineage drawn (server side: a picked key is looked up in it)


def show(run_id: str | None, runs_dir: Path) -> tuple[Any, ...]:
    """Lineage of the picked run -> (plot, node list, open picker, code, message, shown). Only
    a run inside the runs dir (archived ones too) is read: refs refuses any other path."""
    if not run_id:
        return (*(gr.skip(),) * 4, present.error_html("Pick a run in the table first."), gr.skip())
    try:
        run_dir = refs.resolve_run(run_id, runs_dir, archived=True)
        lin = dragon.lineage(run_dir, runs_dir=runs_dir)
    except (FileNotFoundError, ValueError, TypeError) as e:
        return (*(gr.skip(),) * 4, present.error_html(str(e)), gr.skip())
    return (
        lineage_chart.figure(lin),
        lineage_chart.node_list(lin),
        gr.update(choices=lineage_chart.node_choices(lin), value=lin.focus),
        lineage_code(run_dir.name, runs_dir),
        present.hint_html(f"Lineage of {run_dir.name}: {len(lin.nodes)} nodes. Open one below."),
        lin,
    )


def open_node(key: str | None, lin: dragon.Lineage | None, runs_dir: Path) -> tuple[Any, ...]:
    """A node picked -> (selected run, run picker, archived picker, then show's six)."""
    unchanged = (gr.skip(),) * 3
    if not key or lin is None or key == lin.focus:  # the one drawn: nothing to open
        return (*unchanged, *(gr.skip(),) * 6)
    try:
        node = lin.node(key)
    except KeyError:
        return (
            *unchanged,
            *(gr.skip(),) * 4,
            present.error_html("Show the lineage again."),
            gr.skip(),
        )
    if node.kind == "run" and node.state == "present":
        return (node.path, node.id, gr.skip(), *show(node.id, runs_dir))
    if node.kind == "run" and node.state == "archived":
        message = (
            f"{node.id} is archived: it is picked under Archived runs (Unarchive brings it back)."
        )
        return (
            gr.skip(),
            gr.skip(),
            node.id,
            *(gr.skip(),) * 4,
            present.hint_html(message),
            gr.skip(),
        )
    if node.state == "deleted":
        message = f"{node.id} was deleted: its folder {node.path} is gone; only the records naming it remain."
    else:
        where = f" at {node.path}" if node.path else ""
        message = f"{lineage_chart.kind_name(node).capitalize()} {node.id}{where}."
    return (*unchanged, *(gr.skip(),) * 4, present.hint_html(message), gr.skip())


def build(ctx: AppContext) -> LineageWidgets:
    """The widgets, under the Runs tab's actions (wired by `wire`)."""
    with gr.Accordion("Lineage: what the picked run came from, and what came from it", open=True):
        button = gr.Button("Show lineage", elem_id="runs-lineage")
        plot = gr.Plot(label="Lineage", elem_id="lineage-plot")
        opener = gr.Dropdown([], label="Open a node (a run is picked here and in the Monitor)",
                             elem_id="lineage-open")  # fmt: skip
        nodes = gr.HTML(elem_id="lineage-nodes")
    return LineageWidgets(button, plot, nodes, opener, gr.State(None))


def wire(ctx: AppContext, w: LineageWidgets, chosen: gr.Dropdown, archived: gr.Dropdown,
         code: gr.Code, message: gr.HTML) -> None:  # fmt: skip
    drawn = [w.plot, w.nodes, w.opener, code, message, w.shown]

    def showing(run_id: str | None) -> tuple[Any, ...]:
        return show(run_id, ctx.runs_dir)

    def opening(key: str | None, lin: dragon.Lineage | None) -> tuple[Any, ...]:
        return open_node(key, lin, ctx.runs_dir)

    w.button.click(showing, chosen, drawn)
    w.opener.input(opening, [w.opener, w.shown], [ctx.run, chosen, archived, *drawn])
