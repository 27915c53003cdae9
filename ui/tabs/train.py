"""The Train tab: method, LoRA, training and hardware settings, a run name, and Start.

The settings widgets are generated from the dataclasses in `dragonfarm_core.settings`: each
field's metadata gives the label, help, limits and choices, so the app and the Python API never
disagree. `settings_widgets` builds them and `read_settings` turns their values back into the
dataclasses. Start calls `dragon.train` once, which returns as soon as the trainer process is
spawned; the new run becomes the selected run, which the Monitor tab follows.
"""

from __future__ import annotations

import dataclasses
import html
import math
import typing
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.data.codegen import dataset_code, literal
from dragonfarm_core.models import ResolvedModel
from dragonfarm_core.runs import location
from dragonfarm_core.settings import Hardware, Lora, SettingsError, TrainArgs
from ui import present, watch
from ui.context import AppContext

TITLE = "Train"
# (label, value). DPO, ORPO and GRPO join this list when their trainers exist.
METHODS = [("SFT: learn the mapped replies (supervised fine-tuning)", "sft")]
SETTINGS = (Lora, TrainArgs, Hardware)
NOT_SHOWN = frozenset({"extra"})  # free-form trainer keywords: Python only
NO_PARENT = "(none: start from the model chosen in the Model tab)"
CODE_HINT = "# Map a dataset in the Mapping tab; the Python that trains on it appears here."
START_ERRORS = (ValueError, TypeError, OSError, RuntimeError)


def shown_fields(cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if f.name not in NOT_SHOWN]


def _number_step(hint: Any, meta: dict[str, Any], default: Any) -> float:
    if meta.get("step") is not None:
        return meta["step"]
    if hint is int or not default:
        return 1
    # Arrow clicks move a small default (a learning rate) by its own order of magnitude.
    return 1 if default >= 1 else 10 ** math.floor(math.log10(default))


def _limit(value: float) -> str:
    """1e-08, 0.5, 512, 4,294,967,295."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def _widget(cls: type, field: dataclasses.Field, hint: Any, default: Any) -> gr.Component:
    meta = field.metadata
    kwargs = {"label": meta["label"], "info": meta["help"]}
    kwargs["elem_id"] = f"train-{cls.__name__.lower()}-{field.name}"
    if meta.get("choices"):
        return gr.Dropdown(list(meta["choices"]), value=default, **kwargs)
    if hint is bool:
        return gr.Checkbox(value=default, **kwargs)
    numbers = [t for t in typing.get_args(hint) or (hint,) if t in (int, float)]
    if numbers:
        lo, hi = meta.get("min"), meta.get("max")
        if lo is not None and hi is not None:
            kwargs["info"] += f" ({_limit(lo)} to {_limit(hi)})"
        # The limits go in the help text, not in minimum/maximum: Gradio would refuse every
        # half-typed value ("0" on the way to "0.001") with an anonymous toast, where the
        # dataclass names the field in the Train tab's error box.
        return gr.Number(
            value=default,
            step=_number_step(numbers[0], meta, default),
            precision=0 if numbers[0] is int else None,
            **kwargs,
        )
    text = ", ".join(default) if isinstance(default, tuple) else default
    return gr.Textbox(value=text, **kwargs)


def settings_widgets(cls: type) -> list[gr.Component]:
    """One widget per shown field of a settings dataclass, in field order, three to a row."""
    defaults, hints = cls(), typing.get_type_hints(cls)
    fields, widgets = shown_fields(cls), []
    for start in range(0, len(fields), 3):
        with gr.Row():
            widgets += [
                _widget(cls, f, hints[f.name], getattr(defaults, f.name))
                for f in fields[start : start + 3]
            ]
    return widgets


def _optional(hint: Any) -> bool:
    return type(None) in typing.get_args(hint)


def _field_value(cls: type, field: dataclasses.Field, hint: Any, value: Any) -> Any:
    if _optional(hint) and value == 0 and not isinstance(value, bool):
        return None  # Gradio sends an emptied number box as 0; here that means "none"
    if value is None and not _optional(hint):
        raise SettingsError(
            f"{cls.__name__}.{field.name} ({field.metadata['label']}) is empty; enter a value."
        )
    if isinstance(value, str) and typing.get_origin(hint) is not None:  # str | tuple[str, ...]
        names = [part.strip() for part in value.split(",") if part.strip()]
        return names[0] if len(names) == 1 else tuple(names)
    return value


def read_settings(values: Sequence[Any]) -> tuple[Lora, TrainArgs, Hardware]:
    """Widget values, in the order `settings_widgets` made them, -> (Lora, TrainArgs, Hardware).
    Invalid values raise SettingsError naming the field."""
    sizes = [len(shown_fields(cls)) for cls in SETTINGS]
    if len(values) != sum(sizes):
        raise ValueError(f"Expected {sum(sizes)} settings values, got {len(values)}.")
    out = []
    for cls, first, size in zip(SETTINGS, (0, sizes[0], sizes[0] + sizes[1]), sizes, strict=True):
        hints = typing.get_type_hints(cls)
        taken = zip(shown_fields(cls), values[first : first + size], strict=True)
        out.append(cls(**{f.name: _field_value(cls, f, hints[f.name], v) for f, v in taken}))
    lora, args, hardware = out
    return lora, args, hardware


def train_code(
    mapped: dragon.Dataset,
    model: ResolvedModel,
    parent: str | None,
    settings: tuple[Lora, TrainArgs, Hardware],
    name: str | None,
    runs_dir: Path,
) -> str:
    """The Python that starts the same run as the Start button, before there is a run."""
    lines = [dataset_code(mapped.spec(), var="ds").rstrip()]
    if parent:
        lines.append(f"parent = dragon.open_run({literal(parent)})")
    call = ["ds", "parent" if parent else literal(model.name)]
    for key, value in zip(("lora", "args", "hardware"), settings, strict=True):
        setting = present.settings_call(value)
        call += [f"{key}={setting}"] if setting else []
    call += [f"name={literal(name)}"] if name else []
    call += (
        [f"runs_dir={literal(str(runs_dir))}"] if runs_dir != location.configured_runs_dir() else []
    )
    call += [f"revision={literal(model.revision)}"] if model.revision and not parent else []
    body = "\n".join(lines) + "\n\nrun = dragon.train(\n" + "".join(f"    {a},\n" for a in call)
    return present.python_code(body + ")\n")


def preview_code(
    mapped: dragon.Dataset | None,
    model: ResolvedModel,
    method: str,
    parent: str | None,
    name: str | None,
    *values: Any,
    runs_dir: Path,
) -> tuple[str, str]:
    """Widget values -> (the code Start would run, error box)."""
    if mapped is None:
        return CODE_HINT, ""
    try:
        settings = read_settings(values)
    except (SettingsError, ValueError) as e:
        return gr.skip(), present.error_html(str(e))
    return train_code(
        mapped, model, parent or None, settings, (name or "").strip() or None, runs_dir
    ), ""


def launch(
    method: str,
    mapped: dragon.Dataset,
    model: ResolvedModel | dragon.Run,
    settings: tuple[Lora, TrainArgs, Hardware],
    name: str | None,
    runs_dir: Path,
) -> dragon.Run:
    """One call of the public API for the chosen method; returns the started run."""
    lora, args, hardware = settings
    if method == "sft":
        base = model if isinstance(model, dragon.Run) else model.name
        revision = None if isinstance(model, dragon.Run) else model.revision
        return dragon.train(
            mapped,
            base,
            lora=lora,
            args=args,
            hardware=hardware,
            name=name,
            runs_dir=runs_dir,
            revision=revision,
        )
    raise ValueError(f"Method {method!r} is not available; choose one of the listed methods.")


def start(
    mapped: dragon.Dataset | None,
    model: ResolvedModel,
    method: str,
    parent: str | None,
    name: str | None,
    *values: Any,
    runs_dir: Path,
) -> tuple[Any, ...]:
    """Start -> (selected run, what started, code, error box). Returns once the run is queued."""
    try:
        if mapped is None:
            raise ValueError(
                "No mapped dataset yet: load data in the Data tab, then map its "
                "columns in the Mapping tab."
            )
        settings = read_settings(values)
        base = dragon.open_run(parent) if parent else model
        run = launch(method, mapped, base, settings, (name or "").strip() or None, runs_dir)
    except START_ERRORS as e:
        gr.Warning(html.escape(str(e)))
        return gr.skip(), gr.skip(), gr.skip(), present.error_html(str(e))
    started = f"Started run **`{run.id}`**: the Monitor tab follows it."
    return str(run.dir), started, present.portable_code(dragon.code(run)), ""


def parent_choices(runs_dir: Path) -> list[tuple[str, str]]:
    """Succeeded runs, newest first, as (label, run folder) for the "continue from" picker."""
    table = dragon.runs(runs_dir)
    done = table[table["state"] == "succeeded"]
    picks = [(f"{row.id} ({row.name})", str(runs_dir / row.id)) for row in done.itertuples()]
    return [(NO_PARENT, ""), *picks]


def refresh_parents(runs_dir: Path, seen: int | None, current: str | None) -> tuple[Any, Any]:
    """The picker was opened -> (picker update, version seen); reads the runs only when one
    changed since the last look."""
    version = watch.runs_version(runs_dir)
    if version == seen:
        return gr.skip(), gr.skip()
    choices = parent_choices(runs_dir)
    keep = current if current in [value for _, value in choices] else ""
    return gr.update(choices=choices, value=keep), version


def describe_model(model: ResolvedModel) -> str:
    return f"**Model:** `{model.name}` (change it in the Model tab)"


def build(ctx: AppContext) -> None:
    with gr.Row():
        model_text = gr.Markdown(describe_model(ctx.model.value), elem_id="train-model")
        parent = gr.Dropdown(
            [(NO_PARENT, "")],
            value="",
            allow_custom_value=True,  # choices follow the runs folder; Start checks the run
            label="Continue from run (optional)",
            info="Fold a finished run's adapter into the model, then train a new one on top.",
            elem_id="train-parent",
        )
    with gr.Row():
        method = gr.Radio(METHODS, value="sft", label="Method", elem_id="train-method", scale=2)
        name = gr.Textbox(label="Run name (optional)", elem_id="train-name", scale=1)
    with gr.Accordion("Training", open=True):
        args_widgets = settings_widgets(TrainArgs)
    with gr.Accordion("LoRA adapter", open=False):
        lora_widgets = settings_widgets(Lora)
    with gr.Accordion("Hardware", open=False):
        hardware_widgets = settings_widgets(Hardware)
    go = gr.Button("Start training", variant="primary", elem_id="train-start")
    started = gr.Markdown(elem_id="train-started")
    error = gr.HTML(elem_id="train-error")
    code = gr.Code(
        CODE_HINT,
        language="python",
        label="Python",
        interactive=False,
        show_line_numbers=False,
        elem_id="train-code",
    )
    seen = gr.State(None)

    values = [*lora_widgets, *args_widgets, *hardware_widgets]  # the order read_settings reads
    inputs = [ctx.mapped, ctx.model, method, parent, name, *values]
    go.click(partial(start, runs_dir=ctx.runs_dir), inputs, [ctx.run, started, code, error])
    gr.on(
        [w.change for w in inputs],
        partial(preview_code, runs_dir=ctx.runs_dir),
        inputs,
        [code, error],
        trigger_mode="always_last",
        show_progress="hidden",
    )
    ctx.model.change(describe_model, ctx.model, model_text)
    # Succeeded runs are listed when the picker is opened: no timer for a rarely used list.
    parent.focus(partial(refresh_parents, ctx.runs_dir), [seen, parent], [parent, seen])
