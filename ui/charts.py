"""Pure drawing for the Monitor tab: the loss chart (plotly) and the progress bar (HTML).

Like `present.py`, nothing here calls the API or touches Gradio: progress rows in, figures out.
"""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ui.present import duration_text

LOSS_COLOUR, EVAL_COLOUR, LR_COLOUR = "#059669", "#d97706", "#6366f1"


def _series(progress: pd.DataFrame, column: str) -> pd.DataFrame:
    """The rows where `column` was logged (eval rows and train rows share the file)."""
    if column not in progress or progress.empty:
        return pd.DataFrame({"step": [], column: []})
    return progress[["step", column]].dropna().sort_values("step", kind="stable")


def _xy(rows: pd.DataFrame, column: str) -> dict[str, list[float]]:
    # Plain lists: plotly would send numpy arrays base64-encoded, opaque to anyone reading
    # the figure's JSON (a browser test, a notebook user).
    return {"x": rows["step"].tolist(), "y": rows[column].tolist()}


def loss_figure(progress: pd.DataFrame) -> go.Figure:
    """Training loss and eval loss over steps (top), the learning rate (bottom)."""
    fig = make_subplots(
        rows=2, cols=1, shared_xaxes=True, row_heights=[0.72, 0.28], vertical_spacing=0.06
    )
    traces = [
        ("loss", "loss", 1, {"color": LOSS_COLOUR}, 4),
        ("eval_loss", "eval loss", 1, {"color": EVAL_COLOUR, "dash": "dot"}, 7),
        ("lr", "learning rate", 2, {"color": LR_COLOUR}, 0),
    ]
    for column, name, row, line, marker in traces:
        mode = "lines+markers" if marker else "lines"
        points = _xy(_series(progress, column), column)
        scatter = go.Scatter(**points, name=name, mode=mode, line=line, marker={"size": marker})
        fig.add_trace(scatter, row=row, col=1)
    fig.update_yaxes(title_text="loss", row=1, col=1)
    fig.update_yaxes(title_text="lr", exponentformat="e", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title_text="step", row=2, col=1)
    fig.update_layout(
        height=420,
        margin={"l": 60, "r": 20, "t": 30, "b": 40},
        # Top right: Gradio puts the plot's label over the top left corner.
        legend={"orientation": "h", "y": 1.08, "x": 1, "xanchor": "right"},
        hovermode="x unified",
        template="plotly_white",
    )
    if not any(len(trace.x) for trace in fig.data[:2]):
        fig.add_annotation(
            text="Waiting for the first logged step…", showarrow=False, xref="paper",
            yref="paper", x=0.5, y=0.7, font={"color": "#6b7280"},
        )  # fmt: skip
    return fig


def progress_html(state: str | None, step: int, total: int | None, eta_s: float | None) -> str:
    """A bar with 'step 12 / 40 (30 %)' and the time left while the run is going."""
    fraction = min(1.0, step / total) if total else 0.0
    if state == "succeeded":
        fraction = 1.0
    label = f"step {step} / {total}" if total else f"step {step}"
    label += f" ({fraction:.0%})"
    if state == "running" and eta_s is not None:
        label += f" · about {duration_text(eta_s)} left"
    elif state == "queued":
        label = "queued: waiting for the device"
    colour = {"failed": "#ef4444", "cancelled": "#9ca3af"}.get(state or "", LOSS_COLOUR)
    return (
        f'<div class="df-progress" data-state="{html.escape(state or "")}" data-step="{step}">'
        '<div style="background:#e5e7eb;border-radius:6px;height:14px;overflow:hidden">'
        f'<div style="width:{fraction * 100:.1f}%;background:{colour};height:100%"></div></div>'
        f'<div style="font-size:13px;color:#374151;margin-top:4px">{html.escape(label)}</div>'
        "</div>"
    )
