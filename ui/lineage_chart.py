"""Pure drawing of a `dragon.Lineage`: a plotly picture laid out left to right by generation,
and the same nodes as a list under it. Nothing here calls the API or touches Gradio.

    fig = figure(lin)          # columns = generations, arrows = links, the focus ringed
    html = node_list(lin)      # each node: kind, id, state, what it came from
    choices = node_choices(lin)  # (label, key) for the "Open" picker
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

from dragonfarm_core.lineage.graph import PRESENT, Lineage, Node

# One colour per kind, so data, runs and exports read apart at a glance.
KIND_COLOURS = {
    "dataset": "#0284c7", "synthesized": "#0d9488", "feedback": "#db2777",
    "feedback_export": "#9333ea", "pipeline": "#64748b", "run": "#059669",
    "merged": "#d97706", "gguf": "#ca8a04", "published": "#6366f1", "ollama": "#475569",
}  # fmt: skip
KIND_NAMES = {"feedback": "chat", "feedback_export": "feedback data", "merged": "merged model",
              "ollama": "Ollama model"}  # fmt: skip
# A gone node keeps its colour but is drawn hollow (archived) or crossed (deleted).
STATE_SYMBOLS = {"present": "circle", "remote": "diamond", "archived": "circle-open",
                 "deleted": "x"}  # fmt: skip
EDGE_COLOUR = "#94a3b8"
# A link over more than one column arcs above the nodes it passes, this high per column.
ARC_RISE, ARC_SAMPLES = 1 / 3, 24
LABEL_CHARS = 26  # ids are long (a run id is 30+): cut in the picture, whole in the hover
ROW_PX, MIN_HEIGHT_PX = 90, 260


def short(text: str, n: int = LABEL_CHARS) -> str:
    """`text` cut to `n` characters with an ellipsis in the middle (run ids differ at the end).

    >>> short("20261207-101500-tiny-support-2", 16)
    '2026120…upport-2'
    """
    if len(text) <= n:
        return text
    head = (n - 1) // 2
    return text[:head] + "…" + text[len(text) - (n - 1 - head) :]


def kind_name(node: Node) -> str:
    return KIND_NAMES.get(node.kind, node.kind)


def positions(lin: Lineage) -> dict[str, tuple[float, float]]:
    """key -> (x, y): x the generation, y spread evenly around 0 inside each column, in the
    order of `Lineage.ordered` (time)."""
    columns: dict[int, list[str]] = {}
    for node in lin.ordered():
        columns.setdefault(lin.generation(node.key), []).append(node.key)
    out = {}
    for x, keys in columns.items():
        for i, key in enumerate(keys):
            out[key] = (float(x), (len(keys) - 1) / 2 - i)
    return out


def _hover(node: Node) -> str:
    lines = [f"<b>{html.escape(kind_name(node))}</b>: {html.escape(node.id)}"]
    lines += [html.escape(v) for v in (node.detail, node.state, node.time or "", node.path or "")
              if v]  # fmt: skip
    return "<br>".join(lines)


def edge_path(x0: float, y0: float, x1: float, y1: float) -> tuple[list[float], list[float]]:
    """The points an edge is drawn through: a straight line to the next column; over longer
    spans an arc above, so it does not run through the nodes in between (the SFT run -> DPO run
    link passes over the feedback and the pairs).

    >>> edge_path(0, 0, 1, 0)
    ([0, 1], [0, 0])
    >>> xs, ys = edge_path(0, 0, 3, 0); (xs[0], xs[-1], round(max(ys), 2))
    (0.0, 3.0, 0.5)
    """
    if x1 - x0 <= 1:
        return [x0, x1], [y0, y1]
    cx, cy = (x0 + x1) / 2, max(y0, y1) + ARC_RISE * (x1 - x0)
    ts = [i / ARC_SAMPLES for i in range(ARC_SAMPLES + 1)]
    xs = [(1 - t) ** 2 * x0 + 2 * (1 - t) * t * cx + t**2 * x1 for t in ts]
    ys = [(1 - t) ** 2 * y0 + 2 * (1 - t) * t * cy + t**2 * y1 for t in ts]
    return xs, ys


def _edges(fig: go.Figure, lin: Lineage, at: dict[str, tuple[float, float]]) -> list[float]:
    """Draw every link (line, arrowhead, label); returns the heights drawn at."""
    heights = []
    for e in lin.edges:
        xs, ys = edge_path(*at[e.source], *at[e.target])
        heights += ys
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                                 line={"color": EDGE_COLOUR, "width": 1.4}))  # fmt: skip
        tail = max(0, len(xs) - 4)  # the arrowhead sits on the last stretch, into the target
        fig.add_annotation(x=xs[-1], y=ys[-1], ax=xs[tail], ay=ys[tail], xref="x", yref="y",
                           axref="x", ayref="y", showarrow=True, arrowhead=3, arrowsize=1.2,
                           arrowwidth=1.4, arrowcolor=EDGE_COLOUR, standoff=13, text="")  # fmt: skip
        middle = len(xs) // 2
        x, y = (xs[0] + xs[-1]) / 2, (ys[0] + ys[-1]) / 2
        if len(xs) > 2:
            x, y = xs[middle], ys[middle]
        fig.add_annotation(x=x, y=y, text=html.escape(e.link), showarrow=False,
                           font={"size": 10, "color": "#64748b"},
                           bgcolor="rgba(255,255,255,0.85)")  # fmt: skip
    return heights


def figure(lin: Lineage) -> go.Figure:
    at = positions(lin)
    fig = go.Figure()
    heights = _edges(fig, lin, at) + [y for _, y in at.values()]
    nodes = lin.ordered()
    fig.add_trace(go.Scatter(
        x=[at[n.key][0] for n in nodes], y=[at[n.key][1] for n in nodes], mode="markers+text",
        marker={"size": [26 if n.key == lin.focus else 18 for n in nodes],
                "color": [KIND_COLOURS.get(n.kind, "#334155") for n in nodes],
                "symbol": [STATE_SYMBOLS.get(n.state, "circle") for n in nodes],
                "line": {"width": [3 if n.key == lin.focus else 1 for n in nodes],
                         "color": ["#111827" if n.key == lin.focus else "#ffffff" for n in nodes]}},
        text=[f"{html.escape(short(n.id))}<br><i>{html.escape(kind_name(n))}"
              f"{'' if n.state == PRESENT else ', ' + n.state}</i>" for n in nodes],
        textposition="bottom center", textfont={"size": 11},
        hovertext=[_hover(n) for n in nodes], hoverinfo="text", customdata=[n.key for n in nodes],
        showlegend=False,
    ))  # fmt: skip
    low, high = min(heights) - 0.45, max(heights) + 0.2  # room for the labels under the nodes
    width = max(x for x, _ in at.values())
    fig.update_layout(
        height=max(MIN_HEIGHT_PX, int(ROW_PX * (high - low)) + 60),
        margin={"l": 20, "r": 20, "t": 30, "b": 10}, plot_bgcolor="white",
        title={"text": f"Lineage of {html.escape(lin.focus_node.id)}", "font": {"size": 14}},
        xaxis={"visible": False, "range": [-0.6, width + 0.6], "fixedrange": True},
        yaxis={"visible": False, "range": [low, high], "fixedrange": True},
    )  # fmt: skip
    return fig


def node_list(lin: Lineage) -> str:
    """The nodes as an HTML list, left to right, each with what it came from."""
    items = []
    for n in lin.ordered():
        came = "; ".join(
            f"{html.escape(e.link)}: {html.escape(lin.node(e.source).id)}"
            for e in lin.edges
            if e.target == n.key
        )
        state = "" if n.state == PRESENT else f' <b class="df-lineage-{n.state}">{n.state}</b>'
        focus = " <b>(this one)</b>" if n.key == lin.focus else ""
        detail = f" ({html.escape(n.detail)})" if n.detail else ""
        where = f'<br><code style="font-size:11px">{html.escape(n.path)}</code>' if n.path else ""
        came = f"<br><span style='color:#6b7280'>{came}</span>" if came else ""
        items.append(f"<li><i>{html.escape(kind_name(n))}</i> {html.escape(n.id)}{detail}"
                     f"{state}{focus}{came}{where}</li>")  # fmt: skip
    return f'<ol class="df-lineage-nodes">{"".join(items)}</ol>'


def node_choices(lin: Lineage) -> list[tuple[str, str]]:
    """(label, key) of each node, for the picker that opens one. The focus is among them (its
    value while nothing else is picked): a picker whose value left its choices is refused."""
    return [
        (f"{kind_name(n)}: {n.id}" + ("" if n.state == PRESENT else f" ({n.state})")
         + (" (this one)" if n.key == lin.focus else ""), n.key)
        for n in lin.ordered()
    ]  # fmt: skip
