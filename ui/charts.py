"""Pure drawing for the Monitor tab: the training curves (plotly) and the progress bar (HTML).

Like `present.py`, nothing here calls the API or touches Gradio: progress rows in, figures out.
Each method has its own curves: the method table (`METHODS[method].curves`) lists the
progress.jsonl columns its trainer writes, one tuple per panel; `CURVES` says how each column is
drawn. Loss for every method; preference accuracy and reward margin for DPO and ORPO; the mean
reward (total and per reward) and the KL divergence for GRPO.
"""

from __future__ import annotations

import html
import math
import numbers
from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dragonfarm_core.methods import EACH_REWARD, METHODS
from dragonfarm_core.rundir import files
from ui.present import duration_text

LOSS_COLOUR, EVAL_COLOUR, LR_COLOUR = "#059669", "#d97706", "#6366f1"
KL_COLOUR = "#db2777"
# One colour per reward of a GRPO run, after the total's.
REWARD_COLOURS = ("#0284c7", "#7c3aed", "#ca8a04", "#dc2626", "#0d9488", "#9333ea", "#65a30d")
EVAL_LINE = {"color": EVAL_COLOUR, "dash": "dot"}


@dataclass(frozen=True)
class Curve:
    """One trace: a progress column, its legend name, its line style and marker size."""

    column: str
    name: str
    line: dict[str, str]
    marker: int = 4


@dataclass(frozen=True)
class Panel:
    """One subplot: its y-axis title, its curves, and its share of the height."""

    title: str
    curves: tuple[Curve, ...]
    height: float = 1.0


# The legend sits in a band above the plot, top right (Gradio puts the plot's label over the top
# left corner), below plotly's toolbar, which Gradio always shows in the figure's top right
# (about 30 px): with a 30 px top margin the toolbar's icons were drawn over the legend's names.
MODEBAR_PX = 30
LEGEND_PX = 30
MARGIN = {"l": 70, "r": 20, "t": MODEBAR_PX + LEGEND_PX, "b": 40}
LEGEND = {"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 1, "xanchor": "right"}

# How each progress column is drawn: legend name, line, marker size (0: a plain line).
CURVES = {
    "loss": ("loss", {"color": LOSS_COLOUR}, 4),
    "eval_loss": ("eval loss", EVAL_LINE, 7),
    "lr": ("learning rate", {"color": LR_COLOUR}, 0),
    "pref_acc": ("preference accuracy", {"color": REWARD_COLOURS[0]}, 4),
    "eval_pref_acc": ("eval preference accuracy", EVAL_LINE, 7),
    "reward_margin": ("reward margin", {"color": REWARD_COLOURS[1]}, 4),
    "eval_reward_margin": ("eval reward margin", EVAL_LINE, 7),
    "reward": ("reward (total)", {"color": REWARD_COLOURS[0]}, 6),
    "kl": ("KL to the start model", {"color": KL_COLOUR}, 4),
}
# A panel's y-axis title and height, by its first column; the first panel, the method's
# headline, is drawn taller.
PANELS = {"loss": ("loss", 1.0), "pref_acc": ("pref. accuracy", 1.6),
          "reward_margin": ("reward margin", 1.6), "reward": ("mean reward", 1.0),
          "kl": ("KL", 1.0), "lr": ("lr", 1.0)}  # fmt: skip
HEADLINE_HEIGHT = 2.6


def reward_columns(progress: pd.DataFrame) -> list[str]:
    """A GRPO run's per-reward columns (reward_<name>), in the order the trainer wrote them."""
    return [str(c) for c in progress.columns if str(c).startswith("reward_")]


def _curves(column: str, progress: pd.DataFrame) -> list[Curve]:
    if column != EACH_REWARD:
        return [Curve(column, *CURVES[column])]
    return [
        Curve(c, c.removeprefix("reward_") + " reward",
              {"color": REWARD_COLOURS[1 + i % (len(REWARD_COLOURS) - 1)], "dash": "dash"})
        for i, c in enumerate(reward_columns(progress))
    ]  # fmt: skip


def method_panels(method: str | None, progress: pd.DataFrame) -> list[Panel]:
    """The subplots for a run of `method` (its curves in the method table); the first curve of
    the first panel is its headline. A method this app does not know is drawn as SFT."""
    row = METHODS.get(method or "sft", METHODS["sft"])
    panels = []
    for i, columns in enumerate(row.curves):
        title, height = PANELS[columns[0]]
        curves = tuple(curve for column in columns for curve in _curves(column, progress))
        panels.append(Panel(title, curves, HEADLINE_HEIGHT if i == 0 else height))
    return panels


def _series(progress: pd.DataFrame, column: str) -> pd.DataFrame:
    """The rows where `column` was logged (eval rows and train rows share the file)."""
    if column not in progress or progress.empty:
        return pd.DataFrame({"step": [], column: []})
    return progress[["step", column]].dropna().sort_values("step", kind="stable")


def _xy(rows: pd.DataFrame, column: str) -> dict[str, list[float]]:
    # Plain lists: plotly would send numpy arrays base64-encoded, opaque to anyone reading
    # the figure's JSON (a browser test, a notebook user).
    return {"x": rows["step"].tolist(), "y": rows[column].tolist()}


def progress_figure(progress: pd.DataFrame, method: str | None = "sft") -> go.Figure:
    """The method's curves over steps, one subplot per panel, the learning rate at the bottom."""
    panels = method_panels(method, progress)
    total = sum(p.height for p in panels)
    fig = make_subplots(
        rows=len(panels),
        cols=1,
        shared_xaxes=True,
        row_heights=[p.height / total for p in panels],
        vertical_spacing=0.12 / len(panels),
    )
    for row, panel in enumerate(panels, start=1):
        for curve in panel.curves:
            mode = "lines+markers" if curve.marker else "lines"
            points = _xy(_series(progress, curve.column), curve.column)
            scatter = go.Scatter(
                **points, name=curve.name, mode=mode, line=curve.line, marker={"size": curve.marker}
            )
            fig.add_trace(scatter, row=row, col=1)
        fig.update_yaxes(title_text=panel.title, row=row, col=1)
    fig.update_yaxes(exponentformat="e", rangemode="tozero", row=len(panels), col=1)
    fig.update_xaxes(title_text="step", row=len(panels), col=1)
    fig.update_layout(
        height=300 + 60 * len(panels),
        margin=MARGIN,
        legend=LEGEND,
        hovermode="x unified",
        template="plotly_white",
    )
    if not any(len(trace.x) for trace in fig.data[: len(panels[0].curves)]):
        fig.add_annotation(
            text="Waiting for the first logged step…", showarrow=False, xref="paper",
            yref="paper", x=0.5, y=0.8, font={"color": "#6b7280"},
        )  # fmt: skip
    return fig


def _amount(value: object) -> float | None:
    """A count or a duration from a status file; None for anything but a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None


def progress_html(
    state: str | None,
    step: int,
    total: int | None,
    eta_s: float | None,
    phase: str | None = None,
) -> str:
    """A bar with 'step 12 / 40 (30 %)' and the time left while the run is going; past the
    last step (status `phase` "finishing"), what it is still doing.

    Whatever a status holds (it comes from a file), the bar is drawn: a value of the wrong
    type counts as missing."""
    state = state if isinstance(state, str) else None
    amount = _amount(total)
    step, eta_s, whole = int(_amount(step) or 0), _amount(eta_s), int(amount) if amount else None
    fraction = min(1.0, step / whole) if whole else 0.0
    if state == "succeeded":
        fraction = 1.0
    label = f"step {step} / {whole}" if whole else f"step {step}"
    label += f" ({fraction:.0%})"
    if state == "running" and phase == files.FINISHING:
        label += " · finishing: measuring the held-out loss and writing samples"
    elif state == "running" and eta_s is not None:
        label += f" · about {duration_text(eta_s)} left"
    elif state == "queued":
        label = "queued: waiting for the device"
    elif state == files.DAMAGED:
        label = "status.json cannot be read"
    colour = {"failed": "#ef4444", files.DAMAGED: "#ef4444", "cancelled": "#9ca3af"}.get(
        state or "", LOSS_COLOUR
    )
    return (
        f'<div class="df-progress" data-state="{html.escape(state or "")}" data-step="{step}">'
        '<div style="background:#e5e7eb;border-radius:6px;height:14px;overflow:hidden">'
        f'<div style="width:{fraction * 100:.1f}%;background:{colour};height:100%"></div></div>'
        f'<div style="font-size:13px;color:#374151;margin-top:4px">{html.escape(label)}</div>'
        "</div>"
    )
