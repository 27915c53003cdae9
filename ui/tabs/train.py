"""The Train tab: method (SFT, DPO, ORPO, GRPO), its settings, LoRA, training and hardware
settings, a run name, and Start.

The settings widgets are generated from the dataclasses in `dragonfarm_core.settings` (and
GRPO's `ReinforceArgs`): each field's metadata gives the label, help, limits and choices, so the
app and the Python API never disagree. `settings_widgets` builds them and `read_settings` turns
their values back into the dataclasses. Start calls `dragon.train`, `dragon.prefer` or
`dragon.reinforce` once, which returns as soon as the trainer process is spawned; the new run
becomes the selected run, which the Monitor tab follows. GRPO's rewards come from the rewards
builder (`ui.rewards_builder`), and the dry run scores a few sampled completions with them
(`dragon.test_rewards`) before any training. The code panel's Python is `ui.train_code`'s.
The "continue from" picker takes any text; Start, the dry run and the code panel resolve it in
the app's runs dir (`refs.resolve_run`), so a run outside it is refused and never shown as code.
"""

from __future__ import annotations

import dataclasses
import html
import inspect
import math
import typing
import warnings
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core import preference, reinforcement
from dragonfarm_core.models import ResolvedModel
from dragonfarm_core.reinforcement import ReinforceArgs
from dragonfarm_core.rewards import Reward, reward_names
from dragonfarm_core.rundir import refs
from dragonfarm_core.rundir.create import METHOD_KINDS
from dragonfarm_core.settings import Hardware, Lora, SettingsError, TrainArgs
from ui import present, watch
from ui.context import AppContext
from ui.rewards_builder import build_rewards
from ui.train_code import dry_run_code, train_code

TITLE = "Train"
METHODS = [
    ("SFT: learn the mapped replies (supervised fine-tuning)", "sft"),
    ("DPO: prefer the chosen reply to the rejected one", "dpo"),
    ("ORPO: learn the chosen reply, move away from the rejected one (no reference)", "orpo"),
    ("GRPO: practise on prompts, learn from verifiable rewards", "grpo"),
]
FUNCTIONS = {"sft": "train", "dpo": "prefer", "orpo": "prefer", "grpo": "reinforce"}
# The training defaults of each method's function (the manual's), shown when it is picked.
METHOD_ARGS = {
    "sft": TrainArgs(),
    "dpo": preference.DEFAULT_ARGS,
    "orpo": preference.DEFAULT_ARGS,
    "grpo": reinforcement.DEFAULT_ARGS,
}
# What the Mapping tab calls each kind, and which of its choices fits each method.
KIND_NAMES = {
    "sft": "prompt → response rows",
    "conversations": "conversations",
    "pairs": "preference pairs",
    "prompts": "prompts for RL",
}
MAPPING_CHOICES = {
    "sft": "“Prompt → response (SFT)” or “Conversations”",
    "dpo": "“Preference pairs (DPO / ORPO)”",
    "orpo": "“Preference pairs (DPO / ORPO)”",
    "grpo": "“Prompts for RL (GRPO)”",
}
SETTINGS = (Lora, TrainArgs, Hardware)
NOT_SHOWN = frozenset({"extra"})  # free-form trainer keywords: Python only
NO_PARENT = "(none: start from the model chosen in the Model tab)"
CODE_HINT = "# Map a dataset in the Mapping tab; the Python that trains on it appears here."
NO_REWARDS_HINT = "# Add a reward in the rewards builder; the Python that starts GRPO appears here."
PARENT_HINT = "# Pick the run to continue from in the list; the Python for it appears here."
DRY_RUN_PROMPTS = 3
START_ERRORS = (ValueError, TypeError, OSError, RuntimeError)


def prefer_beta_default() -> float:
    return inspect.signature(dragon.prefer).parameters["beta"].default


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


N_SETTINGS = sum(len(shown_fields(cls)) for cls in SETTINGS)


def read_reinforce(values: Sequence[Any]) -> ReinforceArgs:
    """The GRPO widgets' values -> ReinforceArgs; an empty box is refused naming the field."""
    hints, fields = typing.get_type_hints(ReinforceArgs), shown_fields(ReinforceArgs)
    taken = zip(fields, values, strict=True)
    return ReinforceArgs(
        **{f.name: _field_value(ReinforceArgs, f, hints[f.name], v) for f, v in taken}
    )


def method_arguments(
    method: str, beta: float | None, rewards: Sequence[Reward], values: Sequence[Any]
) -> dict[str, Any]:
    """The method's own keyword arguments for its API function (GRPO's from `values`)."""
    if method in ("dpo", "orpo"):
        if beta is None:
            raise SettingsError(f"Beta is empty; enter a value ({prefer_beta_default()} is a "
                                "sensible start).")  # fmt: skip
        return {"method": method, "beta": float(beta)}
    if method == "grpo":
        if not rewards:
            raise ValueError("GRPO needs at least one reward: add one in the rewards builder.")
        return {"rewards": list(rewards), **read_reinforce(values).to_dict()}
    return {}


def kind_problem(method: str, mapped: dragon.Dataset | None) -> str | None:
    """Why the mapped dataset cannot train with `method`, and how to fix it; None if it can."""
    mapping = None if mapped is None else mapped.mapping
    if mapping is None or mapping.kind in METHOD_KINDS[method]:
        return None
    fitting = [m.upper() for m in FUNCTIONS if mapping.kind in METHOD_KINDS[m]]
    wanted = " or ".join(KIND_NAMES[k] for k in METHOD_KINDS[method])
    return (
        f"{method.upper()} trains on {wanted}, but the mapped dataset holds "
        f"{KIND_NAMES[mapping.kind]}. In the Mapping tab, choose {MAPPING_CHOICES[method]} and "
        f"map its columns again, or pick {' or '.join(fitting)} here."
    )


def kind_note(method: str, mapped: dragon.Dataset | None) -> str:
    """The red box under the method when the mapped dataset does not fit it."""
    return present.error_html(kind_problem(method, mapped))


def switch_method(old: str | None, new: str, *args_values: Any) -> tuple[Any, ...]:
    """Method changed -> (DPO/ORPO box, GRPO box, one update per TrainArgs widget, method seen).

    A TrainArgs value still at the old method's default becomes the new method's default (the
    manual's defaults differ per method); a value the person typed stays as it is."""
    before, after = METHOD_ARGS.get(old or "sft", TrainArgs()), METHOD_ARGS[new]
    updates = [
        getattr(after, f.name)
        if value == getattr(before, f.name) != getattr(after, f.name)
        else gr.skip()
        for f, value in zip(shown_fields(TrainArgs), args_values, strict=True)
    ]
    boxes = (gr.update(visible=new in ("dpo", "orpo")), gr.update(visible=new == "grpo"))
    return (*boxes, *updates, new)


def parent_run(parent: str | None, runs_dir: Path) -> str | None:
    """The picked "continue from" run's folder in the runs dir, or None when none is picked.
    Raises OutsideFolderError (a ValueError) for one outside, FileNotFoundError for one gone."""
    return str(refs.resolve_run(parent, runs_dir)) if parent else None


# ---- the dry run -------------------------------------------------------------------------------


def dry_run(
    mapped: dragon.Dataset | None, model: ResolvedModel, parent: str | None,
    rewards: list[Reward] | None, *values: Any, backend: Any = None, runs_dir: Path,
) -> tuple[Any, ...]:  # fmt: skip
    """Dry run -> (score table, summary, code, message): `group_size` completions for each of
    the first DRY_RUN_PROMPTS prompts, sampled as GRPO will, scored by the rewards."""
    try:
        parent = parent_run(parent, runs_dir)
        if mapped is None:
            raise ValueError("No mapped dataset yet: map one as prompts in the Mapping tab.")
        problem = kind_problem("grpo", mapped)
        if problem:
            raise ValueError(problem)
        if not rewards:
            raise ValueError("Add a reward first: the dry run scores completions with them.")
        settings = read_reinforce(values)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            table = dragon.test_rewards(
                rewards, parent or model.name, mapped, n=settings.group_size,
                max_new_tokens=settings.max_new_tokens, temperature=settings.temperature,
                max_prompts=DRY_RUN_PROMPTS, backend=backend,
            )  # fmt: skip
    except START_ERRORS as e:
        return gr.skip(), gr.skip(), gr.skip(), present.error_html(f"Dry run failed: {e}")
    warned = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    summary = present.dry_run_markdown(table, reward_names(rewards), warned)
    code = dry_run_code(mapped, model, parent, rewards, settings, DRY_RUN_PROMPTS)
    return gr.update(value=table, visible=True), summary, code, ""


# ---- code, start -------------------------------------------------------------------------------


def _read(
    method: str, beta: float | None, rewards: Sequence[Reward] | None, values: Sequence[Any]
) -> tuple[tuple[Lora, TrainArgs, Hardware], dict[str, Any]]:
    settings = read_settings(values[:N_SETTINGS])
    return settings, method_arguments(method, beta, rewards or [], values[N_SETTINGS:])


def preview_code(
    mapped: dragon.Dataset | None,
    model: ResolvedModel,
    method: str,
    parent: str | None,
    name: str | None,
    beta: float | None,
    rewards: list[Reward] | None,
    *values: Any,
    runs_dir: Path,
) -> tuple[str, str]:
    """Widget values -> (the code Start would run, error box)."""
    if mapped is None:
        return CODE_HINT, ""
    problem = kind_problem(method, mapped)
    if problem:
        return "# " + problem, ""  # the note under the method says it, in red
    if method == "grpo" and not rewards:
        return NO_REWARDS_HINT, ""
    try:
        parent = parent_run(parent, runs_dir)
    except (FileNotFoundError, ValueError) as e:  # never a call for a run it cannot use
        return PARENT_HINT, present.error_html(str(e))
    try:
        settings, method_args = _read(method, beta, rewards, values)
    except (SettingsError, ValueError) as e:
        return gr.skip(), present.error_html(str(e))
    name = (name or "").strip() or None
    return train_code(mapped, model, parent or None, settings, name, runs_dir, FUNCTIONS[method],
                      method_args), ""  # fmt: skip


def launch(
    method: str,
    mapped: dragon.Dataset,
    model: ResolvedModel | dragon.Run,
    settings: tuple[Lora, TrainArgs, Hardware],
    name: str | None,
    runs_dir: Path,
    method_args: dict[str, Any] | None = None,
) -> dragon.Run:
    """One call of the public API for the chosen method; returns the started run."""
    if method not in FUNCTIONS:
        raise ValueError(f"Method {method!r} is not available; choose one of the listed methods.")
    lora, args, hardware = settings
    continued = isinstance(model, dragon.Run)
    return getattr(dragon, FUNCTIONS[method])(
        mapped,
        model if continued else model.name,
        **(method_args or {}),
        lora=lora,
        args=args,
        hardware=hardware,
        name=name,
        runs_dir=runs_dir,
        revision=None if continued else model.revision,
    )


def start(
    mapped: dragon.Dataset | None,
    model: ResolvedModel,
    method: str,
    parent: str | None,
    name: str | None,
    beta: float | None,
    rewards: list[Reward] | None,
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
        problem = kind_problem(method, mapped)
        if problem:
            raise ValueError(problem)
        settings, method_args = _read(method, beta, rewards, values)
        base = dragon.open_run(parent_run(parent, runs_dir)) if parent else model
        name = (name or "").strip() or None
        run = launch(method, mapped, base, settings, name, runs_dir, method_args)
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
    return watch.refresh_picker(runs_dir, seen, current, parent_choices, lambda values: "")


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
    note = gr.HTML(elem_id="train-kind")
    with gr.Group(visible=False) as prefer_box:
        beta = gr.Number(
            prefer_beta_default(),
            label="Beta",
            info="How hard the model is pushed: DPO's KL strength, ORPO's odds-ratio weight; "
            f"{prefer_beta_default()} is a sensible start for both.",
            step=0.01,
            elem_id="train-beta",
        )
    with gr.Group(visible=False) as grpo_box:
        rl_widgets = settings_widgets(ReinforceArgs)
        builder = build_rewards()
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
    seen, method_seen = gr.State(None), gr.State("sft")

    # The order `_read` reads them in: read_settings's, then read_reinforce's.
    values = [*lora_widgets, *args_widgets, *hardware_widgets, *rl_widgets]
    inputs = [ctx.mapped, ctx.model, method, parent, name, beta, builder.rewards, *values]
    go.click(partial(start, runs_dir=ctx.runs_dir), inputs, [ctx.run, started, code, error])
    gr.on(
        [w.change for w in inputs],
        partial(preview_code, runs_dir=ctx.runs_dir),
        inputs,
        [code, error],
        trigger_mode="always_last",
        show_progress="hidden",
    )
    method.change(
        switch_method,
        [method_seen, method, *args_widgets],
        [prefer_box, grpo_box, *args_widgets, method_seen],
    )
    gr.on([method.change, ctx.mapped.change], kind_note, [method, ctx.mapped], note)
    dry_inputs = [ctx.mapped, ctx.model, parent, builder.rewards, *rl_widgets]
    builder.dry_run.click(partial(dry_run, runs_dir=ctx.runs_dir), dry_inputs, builder.dry_outputs)
    ctx.model.change(describe_model, ctx.model, model_text)
    # Succeeded runs are listed when the picker is opened: no timer for a rarely used list.
    parent.focus(partial(refresh_parents, ctx.runs_dir), [seen, parent], [parent, seen])
