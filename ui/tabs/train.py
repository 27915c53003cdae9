"""The Train tab: method (SFT, DPO, ORPO, GRPO), its settings, LoRA, training and hardware
settings, a run name, and Start.

Its widgets describe a `dragon.RunSpec`: the settings widgets are generated from the
dataclasses (`Lora`, `TrainArgs`, `Hardware` and the method's own group, `PreferenceArgs` or
GRPO's `ReinforceArgs`) by `ui.settings_form`, and each method's facts (its label, the mappings
it trains on, its defaults, its settings group) come from the method table `METHODS`, so the
app and the Python API never disagree. `read_spec` turns the widgets into the spec; Start passes
it to `dragon.start`, which returns as soon as the trainer process is spawned (the new run
becomes the selected run, which the Monitor tab follows), and the code panel shows
`spec_code(spec)`, the generator `dragon.code(run)` uses, so the code shown before Start is the
code of the run it starts. GRPO's rewards come from the rewards builder (`ui.rewards_builder`),
and the dry run scores a few sampled completions with them (`dragon.test_rewards`) before any
training. The "continue from" picker takes any text; Start, the dry run and the code panel
resolve it in the app's runs dir (`refs.resolve_run`), so a run outside it is refused and never
shown as code. The Sweep choice (`ui.sweep_panel`) starts `dragon.sweep` on the same spec
instead: several runs that vary some of its settings, watched below it.
"""

from __future__ import annotations

import html
import warnings
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core import ResolvedModel
from dragonfarm_core.auth.profiles import Profile, get_profile
from dragonfarm_core.codegen.run import dry_run_code, spec_code
from dragonfarm_core.method_args import DpoArgs, GrpoArgs, PreferenceArgs, ReinforceArgs
from dragonfarm_core.methods import METHODS
from dragonfarm_core.rewards import Reward, reward_names
from dragonfarm_core.rundir import queue, refs
from dragonfarm_core.settings import Hardware, Lora, SettingsError, TrainArgs
from ui import (
    active_data,
    memory_line,
    named,
    present,
    queue_panel,
    remote_panel,
    sweep_panel,
    train_defaults,
    watch,
)
from ui.context import AppContext
from ui.rewards_builder import build_rewards
from ui.settings_form import read_group, settings_fields
from ui.tabs.mapping import KINDS

TITLE = "Train"
METHOD_CHOICES = [(row.label, name) for name, row in METHODS.items()]
# How a sentence names each mapping kind, and the Mapping tab's choice for it.
KIND_NAMES = {
    "sft": "prompt → response rows",
    "conversations": "conversations",
    "pairs": "preference pairs",
    "prompts": "prompts for RL",
}
MAPPING_LABELS = {kind: label for label, kind in KINDS}
SETTINGS = (Lora, TrainArgs, Hardware)
DPO_OWN = ("loss_type", "label_smoothing")  # DpoArgs' fields besides PreferenceArgs' beta
NO_PARENT = "(none: start from the model chosen in the Model tab)"
CODE_HINT = "# Map a dataset in the Mapping tab; the Python that trains on it appears here."
NO_REWARDS_HINT = "# Add a reward in the rewards builder; the Python that starts GRPO appears here."
PARENT_HINT = "# Pick the run to continue from in the list; the Python for it appears here."
MONITOR_TAB = "monitor"  # the Monitor tab's id: its module name (ui/layout.py)
DRY_RUN_PROMPTS = 3
START_ERRORS = (ValueError, TypeError, OSError, RuntimeError)


# The settings widgets' values, by group (class name) and field name: {"Lora": {"r": 16, ...},
# "TrainArgs": {...}, "Hardware": {...}, "ReinforceArgs": {...}, "DpoArgs": {DPO_OWN's}}.
Settings = Mapping[str, Mapping[str, Any]]


def read_settings(settings: Settings) -> tuple[Lora, TrainArgs, Hardware]:
    """The settings widgets' values by name -> (Lora, TrainArgs, Hardware). Invalid values
    raise SettingsError naming the field."""
    lora, args, hardware = (read_group(cls, settings[cls.__name__]) for cls in SETTINGS)
    return lora, args, hardware


def method_settings(
    method: str, beta: float | None, rewards: Sequence[Reward], settings: Settings
) -> PreferenceArgs | GrpoArgs | None:
    """The method's own settings group, from its widgets: GRPO's `settings["ReinforceArgs"]`,
    DPO's own `settings["DpoArgs"]` (DPO_OWN) beside `beta`."""
    group = METHODS[method].settings
    if group is PreferenceArgs or group is DpoArgs:
        if beta is None:
            raise SettingsError(f"Beta is empty; enter a value ({PreferenceArgs().beta} is a "
                                "sensible start).")  # fmt: skip
        own = settings["DpoArgs"] if group is DpoArgs else {}
        return read_group(group, {"beta": beta, **own})
    if group is GrpoArgs:
        if not rewards:
            raise ValueError("GRPO needs at least one reward: add one in the rewards builder.")
        reinforce = read_group(ReinforceArgs, settings["ReinforceArgs"])
        return GrpoArgs(rewards=list(rewards), **reinforce.to_dict())
    return None


def kind_problem(method: str, mapped: dragon.Dataset | None) -> str | None:
    """Why the mapped dataset cannot train with `method`, and how to fix it; None if it can."""
    mapping, kinds = None if mapped is None else mapped.mapping, METHODS[method].mapping_kinds
    if mapping is None or mapping.kind in kinds:
        return None
    fitting = [m.upper() for m, row in METHODS.items() if mapping.kind in row.mapping_kinds]
    wanted = " or ".join(KIND_NAMES[k] for k in kinds)
    choose = " or ".join(f"“{MAPPING_LABELS[k]}”" for k in kinds)
    return (
        f"{method.upper()} trains on {wanted}, but the mapped dataset holds "
        f"{KIND_NAMES[mapping.kind]}. In the Mapping tab, choose {choose} and "
        f"map its columns again, or pick {' or '.join(fitting)} here."
    )


def kind_note(method: str, mapped: dragon.Dataset | None) -> str:
    """The red box under the method when the mapped dataset does not fit it."""
    return present.error_html(kind_problem(method, mapped))


def parent_run(parent: str | None, runs_dir: Path) -> str | None:
    """The picked "continue from" run's folder in the runs dir, or None when none is picked.
    Raises OutsideFolderError (a ValueError) for one outside, FileNotFoundError for one gone."""
    return str(refs.resolve_run(parent, runs_dir)) if parent else None


def read_spec(
    mapped: dragon.Dataset | None, model: ResolvedModel, method: str, parent: str | None,
    name: str | None, beta: float | None, rewards: Sequence[Reward] | None,
    settings: Settings, runs_dir: Path,
) -> dragon.RunSpec:  # fmt: skip
    """The widgets' values -> the RunSpec that Start starts. Raises what is wrong, field named."""
    if method not in METHODS:
        raise ValueError(f"Method {method!r} is not available; choose one of the listed methods.")
    if mapped is None:
        raise ValueError(
            "No mapped dataset yet: load data in the Data tab, then map its "
            "columns in the Mapping tab."
        )
    problem = kind_problem(method, mapped)
    if problem:
        raise ValueError(problem)
    lora, args, hardware = read_settings(settings)
    own = method_settings(method, beta, rewards or [], settings)
    base = parent_run(parent, runs_dir)
    return dragon.RunSpec(
        method, mapped, base or model.name, lora=lora, args=args, hardware=hardware,
        method_args=own, name=(name or "").strip() or None,
        revision=None if base else model.revision,
    )  # fmt: skip


# ---- the dry run -------------------------------------------------------------------------------


def check_rewards_allowed(rewards: Sequence[Reward] | None, profile: Profile | None) -> None:
    """Raise ValueError when the profile turns off a reward's type (a command or custom reward
    on a Space): the builder never offers those, but a call through the API could carry one."""
    for r in rewards or []:
        refused = (profile or get_profile("local")).reward_refusal(r.type)
        if refused:
            raise ValueError(refused)


def dry_run(
    mapped: dragon.Dataset | None, model: ResolvedModel, parent: str | None,
    rewards: list[Reward] | None, reinforce: Mapping[str, Any], *, backend: Any = None,
    runs_dir: Path, profile: Profile | None = None,
) -> tuple[Any, ...]:  # fmt: skip
    """Dry run -> (score table, summary, code, message): `group_size` completions for each of
    the first DRY_RUN_PROMPTS prompts, sampled as GRPO will, scored by the rewards.
    `reinforce`: the ReinforceArgs widgets' values by field name."""
    try:
        check_rewards_allowed(rewards, profile)
        parent = parent_run(parent, runs_dir)
        if mapped is None:
            raise ValueError("No mapped dataset yet: map one as prompts in the Mapping tab.")
        problem = kind_problem("grpo", mapped)
        if problem:
            raise ValueError(problem)
        if not rewards:
            raise ValueError("Add a reward first: the dry run scores completions with them.")
        settings = GrpoArgs(rewards=rewards, **read_group(ReinforceArgs, reinforce).to_dict())
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
    code = dry_run_code(mapped, parent or model.name, settings, DRY_RUN_PROMPTS)
    return gr.update(value=table, visible=True), summary, present.portable_code(code), ""


# ---- code, start -------------------------------------------------------------------------------


def preview_code(
    mapped: dragon.Dataset | None, model: ResolvedModel, method: str, parent: str | None,
    name: str | None, beta: float | None, rewards: list[Reward] | None, settings: Settings,
    *, runs_dir: Path,
) -> tuple[str, str]:  # fmt: skip
    """Widget values -> (the code Start would run, error box)."""
    if mapped is None:
        return CODE_HINT, ""
    problem = kind_problem(method, mapped)
    if problem:
        return "# " + problem, ""  # the note under the method says it, in red
    if METHODS[method].settings is GrpoArgs and not rewards:
        return NO_REWARDS_HINT, ""
    try:
        parent_run(parent, runs_dir)
    except (FileNotFoundError, ValueError) as e:  # never a call for a run it cannot use
        return PARENT_HINT, present.error_html(str(e))
    try:
        spec = read_spec(mapped, model, method, parent, name, beta, rewards, settings, runs_dir)
    except (SettingsError, ValueError, TypeError) as e:
        return gr.skip(), present.error_html(str(e))
    return present.portable_code(spec_code(spec, runs_dir)), ""


def preview_changed(previewed: str | None, *, runs_dir: Path, **values: Any) -> tuple[Any, ...]:
    """Start's input values, by name, -> (code, error box, code previewed): nothing changes
    when the code is the
    one previewed last. A value can fire its change event more than once, and those events can
    queue behind a click: replaying one must not replace the code Start or Run elsewhere wrote
    for the same values (CI saw a bundle's code replaced so)."""
    code, error = preview_code(**values, runs_dir=runs_dir)
    if code == previewed:
        return gr.skip(), gr.skip(), gr.skip()
    # A refused value shows its error and keeps the old code: forget that code, so that putting
    # the value back previews again and clears the error.
    return code, error, code if isinstance(code, str) else None


def memory(*, runs_dir: Path, **values: Any) -> str:
    """Start's input values, by name, -> the memory line above Start (empty while no spec can
    be built; the code panel says why)."""
    try:
        spec = read_spec(**values, runs_dir=runs_dir)
        return memory_line.memory_html(spec, values["model"],
                                       parent_run(values["parent"], runs_dir))  # fmt: skip
    except (SettingsError, ValueError, TypeError, KeyError, OSError):
        return ""


def start(
    mapped: dragon.Dataset | None, model: ResolvedModel, method: str, parent: str | None,
    name: str | None, beta: float | None, rewards: list[Reward] | None, settings: Settings,
    *, runs_dir: Path, profile: Profile | None = None,
) -> tuple[Any, ...]:  # fmt: skip
    """Start -> (selected run, what started, code, error box). Returns once the run is queued."""
    try:
        check_rewards_allowed(rewards, profile)
        # The cap is checked again as the job is queued; asking first leaves no run folder.
        if profile and (over := queue_panel.cap_refusal(profile, runs_dir)):
            raise RuntimeError(over)
        spec = read_spec(mapped, model, method, parent, name, beta, rewards, settings, runs_dir)
        run = dragon.start(spec, runs_dir=runs_dir)
    except START_ERRORS as e:
        gr.Warning(html.escape(str(e)))
        return gr.skip(), gr.skip(), gr.skip(), present.error_html(str(e))
    started = f"Started run **`{run.id}`**: the Monitor tab follows it."
    return str(run.dir), started, present.portable_code(dragon.code(run)), ""


def checked_spec(
    *, runs_dir: Path, profile: Profile | None = None, **values: Any
) -> dragon.RunSpec:
    """Start's input values, by name, -> the RunSpec it would start, rewards checked against
    the profile (what "Run elsewhere" bundles)."""
    check_rewards_allowed(values["rewards"], profile)
    return read_spec(**values, runs_dir=runs_dir)


def offer_monitor(error: str | None) -> Any:
    """After Start: the way on to the Monitor, shown when the run started."""
    return gr.update(visible=not error)


def open_monitor() -> Any:
    return gr.Tabs(selected=MONITOR_TAB)


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


def offer_devices(widgets: Sequence[Any]) -> None:
    """The Device picker lists the devices this machine has (cpu, cuda:0, cuda:1...: each
    its own queue), after auto and the plain names."""
    picker = next(w for w in widgets if w.elem_id == "train-hardware-device")
    names = [value for _, value in picker.choices]
    picker.choices = [(n, n) for n in [*names, *(d for d in queue.devices() if d not in names)]]


def build(ctx: AppContext) -> None:
    active_data.build_active(ctx, "train-active")  # which data Start trains
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
        method = gr.Radio(
            METHOD_CHOICES, value="sft", label="Method", elem_id="train-method", scale=2
        )
        name = gr.Textbox(label="Run name (optional)", elem_id="train-name", scale=1)
    note = gr.HTML(elem_id="train-kind")
    fits = dragon.recommended(train_defaults.target(ctx.model.value, None, ctx.runs_dir))
    recommended = gr.HTML(train_defaults.note_html(fits, "sft"), elem_id="train-recommended")
    with gr.Group(visible=False) as prefer_box:
        beta = settings_fields(PreferenceArgs)["beta"]
        with gr.Group(visible=False) as dpo_box:
            dpo_widgets = settings_fields(DpoArgs, only=DPO_OWN)
    with gr.Group(visible=False) as grpo_box:
        rl_widgets = settings_fields(ReinforceArgs)
        builder = build_rewards(ctx.profile)
    with gr.Accordion("Training", open=True):
        args_widgets = settings_fields(TrainArgs, fits.args)
    with gr.Accordion("LoRA adapter", open=False):
        lora_widgets = settings_fields(Lora, fits.lora)
    with gr.Accordion("Hardware", open=False):
        hardware_widgets = settings_fields(Hardware)
        offer_devices(list(hardware_widgets.values()))
    memory_box = gr.HTML(elem_id="train-memory")  # the preflight estimate, as settings change
    mode = gr.Radio(list(sweep_panel.MODES), value=sweep_panel.MODES[0], label="Train",
                    info="One run with these settings, or a sweep: several runs that vary "
                    "some of them, ranked by an objective.", elem_id="train-mode")  # fmt: skip
    with gr.Row() as start_row:
        go = gr.Button("Start training", variant="primary", elem_id="train-start", scale=2)
        elsewhere = remote_panel.elsewhere_controls()  # bundles instead, for a cloud GPU
    sweep_box, sweep_widgets = sweep_panel.place(ctx.runs_dir)
    elsewhere_shown = remote_panel.elsewhere_outputs()
    started = gr.Markdown(elem_id="train-started")
    to_monitor = gr.Button(
        "Watch it in the Monitor →", visible=False, size="sm", elem_id="train-open-monitor"
    )
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
    previewed = gr.State(None)  # the code the last preview showed
    following = gr.State((train_defaults.target(ctx.model.value, None, ctx.runs_dir), "sft"))

    settings = {"Lora": lora_widgets, "TrainArgs": args_widgets, "Hardware": hardware_widgets,
                "ReinforceArgs": rl_widgets, "DpoArgs": dpo_widgets}  # fmt: skip
    form = {"mapped": ctx.mapped, "model": ctx.model, "method": method, "parent": parent,
            "name": name, "beta": beta, "rewards": builder.rewards, "settings": settings}  # fmt: skip
    inputs = named.inputs(form)
    go.click(
        named.handler(partial(start, runs_dir=ctx.runs_dir, profile=ctx.profile), form),
        inputs,
        [ctx.run, started, code, error],
    ).then(offer_monitor, error, to_monitor)
    if ctx.tabs is not None:
        to_monitor.click(open_monitor, None, ctx.tabs)
    checked = partial(checked_spec, profile=ctx.profile)
    remote_panel.wire_elsewhere(ctx, elsewhere, elsewhere_shown, form, code, checked)
    sweep_panel.wire(ctx, sweep_box, sweep_widgets, form, checked, mode, [start_row, code])
    changes = [w.change for w in named.components(form)]
    gr.on(
        changes,
        named.handler(
            partial(preview_changed, runs_dir=ctx.runs_dir), {"previewed": previewed, **form}
        ),  # fmt: skip
        named.inputs({"previewed": previewed, **form}),
        [code, error, previewed],
        trigger_mode="always_last",
        show_progress="hidden",
    )
    gr.on(
        changes,
        named.handler(partial(memory, runs_dir=ctx.runs_dir), form),
        inputs,
        memory_box,
        trigger_mode="always_last",
        show_progress="hidden",
    )
    method.change(train_defaults.method_boxes, method, [prefer_box, dpo_box, grpo_box])
    followed = {"Lora": lora_widgets, "TrainArgs": args_widgets}  # train_defaults.FOLLOWED
    follow = {"seen": following, "model": ctx.model, "method": method, "parent": parent,
              "values": followed}  # fmt: skip
    gr.on(
        [method.change, ctx.model.change, parent.change],
        named.handler(partial(train_defaults.follow, runs_dir=ctx.runs_dir), follow),
        named.inputs(follow),
        [*train_defaults.followed_widgets(followed), recommended, following],
    )
    gr.on([method.change, ctx.mapped.change], kind_note, [method, ctx.mapped], note)
    dry = {"mapped": ctx.mapped, "model": ctx.model, "parent": parent,
           "rewards": builder.rewards, "reinforce": rl_widgets}  # fmt: skip
    assert builder.dry_run is not None  # built with its dry run
    builder.dry_run.click(
        named.handler(partial(dry_run, runs_dir=ctx.runs_dir, profile=ctx.profile), dry),
        named.inputs(dry),
        builder.dry_outputs,
    )
    ctx.model.change(describe_model, ctx.model, model_text)
    # Succeeded runs are listed when the picker is opened: no timer for a rarely used list.
    parent.focus(partial(refresh_parents, ctx.runs_dir), [seen, parent], [parent, seen])
