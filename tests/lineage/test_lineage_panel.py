"""The Runs tab's Lineage handlers without a browser: the picture, the node list, the code panel,
and opening a node (a run is selected; an archived one picked under Archived runs; a file named)."""

from __future__ import annotations

import gradio as gr
import plotly.graph_objects as go

import dragonfarm_core as dragon
from ui import lineage_chart, lineage_panel


def test_show_draws_the_picked_run_left_to_right(chain):
    fig, nodes, picker, code, message, lin = lineage_panel.show(chain.dpo.id, chain.runs)
    assert isinstance(fig, go.Figure) and isinstance(lin, dragon.Lineage)
    points = fig.data[-1]  # the nodes, drawn over the links
    xs = dict(zip(points.customdata, points.x, strict=True))
    # Left to right by generation: data, SFT run, feedback, pairs, DPO run, merged, GGUF.
    order = sorted(xs, key=xs.get)
    assert [lin.node(k).kind for k in order] == [
        "dataset", "run", "feedback", "feedback_export", "run", "merged", "gguf",
    ]  # fmt: skip
    assert len(fig.layout.annotations) == 2 * len(lin.edges)  # an arrow and a label each
    assert chain.sft.id in nodes and "continued from" in nodes
    assert f'dragon.lineage("{chain.dpo.id}", runs_dir="{chain.runs}")' in code
    labels = [label for label, _ in picker["choices"]]
    assert f"run: {chain.sft.id}" in labels and len(labels) == 7
    # The picker shows the run drawn, so its value is always one of its choices.
    assert picker["value"] == lin.focus and f"run: {chain.dpo.id} (this one)" in labels
    assert "7 nodes" in message


def test_opening_a_parent_run_selects_it_and_draws_its_lineage(chain):
    lin = lineage_panel.show(chain.dpo.id, chain.runs)[-1]
    parent = next(n for n in lin.parents(lin.focus) if n.kind == "run")
    selected, chosen, archived, fig, *_, shown = lineage_panel.open_node(
        parent.key, lin, chain.runs
    )
    assert (selected, chosen) == (str(chain.sft.dir), chain.sft.id)
    assert shown.focus == parent.key and isinstance(fig, go.Figure)


def test_opening_an_archived_run_picks_it_under_archived(chain):
    dragon.archive_run(chain.sft, runs_dir=chain.runs, force=True)
    lin = lineage_panel.show(chain.dpo.id, chain.runs)[-1]
    parent = next(n for n in lin.parents(lin.focus) if n.kind == "run")
    out = lineage_panel.open_node(parent.key, lin, chain.runs)
    assert out[2] == chain.sft.id and out[:2] == (gr.skip(), gr.skip())
    assert "archived" in out[-2]
    assert "archived" in lineage_chart.node_list(lin)


def test_opening_a_file_names_its_path_and_a_forged_key_is_refused(chain):
    lin = lineage_panel.show(chain.dpo.id, chain.runs)[-1]
    pairs = next(n for n in lin.nodes if n.kind == "feedback_export")
    assert str(chain.pairs) in lineage_panel.open_node(pairs.key, lin, chain.runs)[-2]
    assert "Show the lineage again" in lineage_panel.open_node("run:/etc", lin, chain.runs)[-2]


def test_a_run_outside_the_runs_dir_is_refused(chain, tmp_path):
    message = lineage_panel.show("../elsewhere", chain.runs)[4]
    assert "outside" in message or "No run" in message
