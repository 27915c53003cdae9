"""The Train tab's settings follow the model and method: the values `dragon.recommended` gives.

The fields open filled with what is recommended for the model the tab opens with (SFT). When
the method, the model or the "continue from" run changes, each LoRA and training field still
at the old recommendation takes the new one (the manual's defaults differ per method; the
bundled model has its own); a value the person typed stays as it is. A note under the method
says which recommendation the fields hold, so "recommended for this model" is visible and
overridable. No torch here: the recommendations are a table in the core.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core import ResolvedModel
from dragonfarm_core.method_args import DpoArgs, GrpoArgs, PreferenceArgs
from dragonfarm_core.methods import METHODS
from dragonfarm_core.rundir import refs
from dragonfarm_core.settings import Lora, TrainArgs
from ui.settings_form import shown_fields

FOLLOWED = (Lora, TrainArgs)  # the groups a recommendation fills, in the widgets' order
# The training fields a recommendation usually changes, as the note names them.
NAMES = {"learning_rate": "learning rate", "epochs": "epochs",
         "grad_accum": "gradient accumulation", "max_seq_len": "max sequence length"}  # fmt: skip


def target(model: ResolvedModel | None, parent: str | None, runs_dir: Path) -> str:
    """What the run will train: the picked "continue from" run (when it is a run in the runs
    dir), else the model chosen in the Model tab."""
    if parent:
        try:
            return str(refs.resolve_run(parent, runs_dir))
        except (FileNotFoundError, ValueError):
            pass  # Start and the code panel refuse it; the fields follow the model meanwhile
    return model.name if model is not None else dragon.BUNDLED_MODEL_ID


def values_of(fits: dragon.Recommendation) -> dict[str, dict[str, Any]]:
    """The recommendation as the followed widgets' values, by group and field name."""
    groups = {Lora: fits.lora, TrainArgs: fits.args}
    return {cls.__name__: {f.name: getattr(groups[cls], f.name) for f in shown_fields(cls)}
            for cls in FOLLOWED}  # fmt: skip


def followed_widgets(widgets: Mapping[str, Mapping[str, Any]]) -> list[Any]:
    """The followed widgets (by group and field name), in the order `follow` updates them."""
    return [widgets[cls.__name__][f.name] for cls in FOLLOWED for f in shown_fields(cls)]


def note_html(fits: dragon.Recommendation, method: str) -> str:
    """The line under the method: which recommendation the fields hold, and where it departs
    from the manual's defaults for the method."""
    default = METHODS[method].default_args
    changed = [
        f"{label} {getattr(fits.args, name):g}"
        for name, label in NAMES.items()
        if getattr(fits.args, name) != getattr(default, name)
    ]
    figures = f" Not the manual's defaults: {', '.join(changed)}." if changed else ""
    return (
        f"<p class='recommended-note'>{html.escape(fits.note, quote=False)}{html.escape(figures)} "
        "Change any field; what you type stays when you switch method or model.</p>"
    )


def follow(
    seen: tuple[str, str] | None, model: ResolvedModel | None, method: str, parent: str | None,
    values: Mapping[str, Mapping[str, Any]], *, runs_dir: Path,
) -> tuple[Any, ...]:  # fmt: skip
    """Method, model or parent changed -> (one update per LoRA and training widget, in
    `followed_widgets`' order, the note, what the fields now follow). `values`: the widgets'
    values by group and field name. A field still at the old recommendation takes the new one."""
    now = (target(model, parent, runs_dir), method if method in METHODS else "sft")
    before = values_of(dragon.recommended(*(seen or now)))
    fits = dragon.recommended(*now)
    after = values_of(fits)
    updates = [
        new if values[group][name] == before[group][name] != new else gr.skip()
        for group, fields in after.items()
        for name, new in fields.items()
    ]
    return (*updates, note_html(fits, now[1]), now)


def method_boxes(method: str) -> tuple[Any, Any, Any]:
    """The DPO/ORPO box (beta), DPO's loss box inside it and the GRPO box, shown for the
    methods they belong to."""
    group = METHODS[method].settings if method in METHODS else None
    return (gr.update(visible=group in (PreferenceArgs, DpoArgs)),
            gr.update(visible=group is DpoArgs), gr.update(visible=group is GrpoArgs))  # fmt: skip
