"""The Pipelines tab's step list editor: pick a kind, fill in its settings, Add; then move
steps up or down or remove them. The list is checked as a chain after every change
(`pipeline_chain.check_steps`, as a background pipeline), so a step that cannot run is named
before Start.

The steps are kept in a `gr.State` as the step objects `dragon.pipeline` takes. Their
settings come from `ui.pipeline_form`; the dataset from the app's active mapped dataset
(a prefer step may take the pairs of the synthesis step before instead); the judge from the
same form the Evaluate tab's judge and the synthesis panels use (`ui.llm_form`); a reinforce
step's rewards from a rewards builder like the Train tab's (`ui.rewards_builder`).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.pipelines.chain import PipelineError, check_steps
from dragonfarm_core.pipelines.steps import KINDS, Step
from dragonfarm_core.settings import SettingsError, TrainArgs
from ui import llm_form, named, pipeline_form, pipeline_view, present
from ui.rewards_builder import build_rewards
from ui.settings_form import field_widget, read_group, shown_fields

DATA_CHOICES = [("The active mapped dataset", "active"),
                ("The pairs of the synthesis step before", "pairs")]  # fmt: skip
JUDGED = ("synthesize_pairs", "judge")
NO_STEPS = "Add steps above; the pipeline runs them in order."
ERRORS = (PipelineError, SettingsError, ValueError, TypeError, OSError)


@dataclass(frozen=True)
class Builder:
    """The editor's parts the tab needs: the steps, the error box and the check line."""

    steps: gr.State  # list[Step]
    check: gr.HTML
    error: gr.HTML


def check_html(steps: Sequence[Step] | None) -> str:
    """Whether the steps would start: the first step that cannot, by number and kind."""
    if not steps:
        return present.hint_html(NO_STEPS)
    try:
        check_steps(list(steps), background=True)
    except PipelineError as e:
        return present.error_html(str(e))
    return present.hint_html(f"Ready: {len(steps)} step{'s' if len(steps) > 1 else ''}.")


def list_update(steps: Sequence[Step], selected: int | None) -> Any:
    """The step list (a radio, one choice per step); the selection kept while it is there."""
    choices = [(pipeline_view.step_label(i, s, pipeline_form.settings_text(s)), i)
               for i, s in enumerate(steps)]  # fmt: skip
    keep = selected if selected is not None and 0 <= selected < len(steps) else None
    return gr.update(choices=choices, value=keep)


def _edited(steps: list[Step], selected: int | None) -> tuple[Any, ...]:
    return steps, list_update(steps, selected), check_html(steps), present.error_html("")


def _page_values(kind: str, mapped: dragon.Dataset | None, data: str | None,
                 rewards: Sequence[Any] | None, use_defaults: bool, args: Mapping[str, Any],
                 judge: Mapping[str, Any], runs_dir: Path) -> dict[str, Any]:  # fmt: skip
    """What a step of `kind` takes from the page: its dataset, training settings, judge,
    rewards."""
    page: dict[str, Any] = {}
    cls = KINDS[kind]
    if cls.trains:
        page["args"] = None if use_defaults else read_group(TrainArgs, args)
    if kind == "reinforce":
        if not rewards:
            raise ValueError("A reinforce step needs at least one reward: add one under "
                             "Rewards, then Add step.")  # fmt: skip
        page["rewards"] = list(rewards)
    if kind in ("train", "reinforce") or (kind == "prefer" and data != "pairs"):
        if mapped is None or mapped.mapping is None:
            raise ValueError(f"A {kind} step trains on the active mapped dataset, and there is "
                             "none: load data in the Data tab and map it in the Mapping tab.")  # fmt: skip
        page["dataset"] = mapped
    if kind in JUDGED:
        page["judge"] = llm_form.make_llm(**judge, role="judge", runs_dir=runs_dir, judge=True)
    return page


def add_step(steps: list[Step] | None, kind: str, mapped: dragon.Dataset | None,
             data: str | None, rewards: Sequence[Any] | None, use_defaults: bool,
             judge: Mapping[str, Any], fields: Mapping[str, Mapping[str, Any]],
             args: Mapping[str, Any], *, runs_dir: Path) -> tuple[Any, ...]:  # fmt: skip
    """Add -> (steps, step list, check line, error box). By name: `judge`, the judge form's
    values; `fields`, each kind's own widgets' values (kind -> field -> value); `args`, the
    TrainArgs widgets' values."""
    steps = list(steps or [])
    try:
        if kind not in fields:
            raise ValueError(f"Unknown step kind {kind!r}; one of {', '.join(fields)}.")
        read = pipeline_form.read_fields(kind, fields[kind])
        page = _page_values(kind, mapped, data, rewards, use_defaults, args, judge, runs_dir)
        step = pipeline_form.make_step(kind, read, **page)
    except ERRORS as e:
        return gr.skip(), gr.skip(), gr.skip(), present.error_html(str(e))
    steps.append(step)
    return _edited(steps, len(steps) - 1)


def move_step(steps: list[Step] | None, selected: int | None, delta: int) -> tuple[Any, ...]:
    """Up (-1) or Down (+1) -> (steps, step list, check line, error box)."""
    steps = list(steps or [])
    if selected is None or not 0 <= selected < len(steps):
        return gr.skip(), gr.skip(), gr.skip(), present.error_html("Pick a step in the list.")
    target = min(max(selected + delta, 0), len(steps) - 1)
    steps[selected], steps[target] = steps[target], steps[selected]
    return _edited(steps, target)


def remove_step(steps: list[Step] | None, selected: int | None) -> tuple[Any, ...]:
    """Remove -> (steps, step list, check line, error box)."""
    steps = list(steps or [])
    if selected is None or not 0 <= selected < len(steps):
        return gr.skip(), gr.skip(), gr.skip(), present.error_html("Pick a step in the list.")
    del steps[selected]
    return _edited(steps, min(selected, len(steps) - 1) if steps else None)


def show_kind(kind: str) -> list[Any]:
    """The kind changed -> its settings shown: one group per kind, then the dataset choice,
    the judge, the training settings and the rewards."""
    groups = [gr.update(visible=k == kind) for _, k in pipeline_form.KIND_CHOICES]
    trains = KINDS[kind].trains
    return [*groups, gr.update(visible=kind == "prefer"), gr.update(visible=kind in JUDGED),
            gr.update(visible=trains), gr.update(visible=kind == "reinforce")]  # fmt: skip


def _args_widgets() -> tuple[gr.Checkbox, dict[str, gr.Component]]:
    """The training settings shared by the training kinds (by default none: each step takes
    the settings recommended for its model and method, `dragon.recommended`)."""
    defaults = TrainArgs()
    use = gr.Checkbox(True, label="Use the settings recommended for the model and method",
                      elem_id="pipe-args-defaults")  # fmt: skip
    fields, widgets = shown_fields(TrainArgs), {}
    hints = typing.get_type_hints(TrainArgs)
    for start in range(0, len(fields), 3):
        with gr.Row():
            for f in fields[start : start + 3]:
                widgets[f.name] = field_widget(f, hints[f.name], getattr(defaults, f.name),
                                               elem_id=f"pipe-args-{f.name}")  # fmt: skip
    return use, widgets


def build_builder(ctx: Any) -> Builder:
    """The editor's widgets, wired; call inside the tab's `build`."""
    first = pipeline_form.KIND_CHOICES[0][1]
    with gr.Row():
        kind = gr.Dropdown(pipeline_form.KIND_CHOICES, value=first, label="Step",
                           scale=3, elem_id="pipe-kind")  # fmt: skip
        add = gr.Button("Add step", variant="secondary", scale=1, elem_id="pipe-add")
    groups, kind_values = [], {}
    for _, k in pipeline_form.KIND_CHOICES:
        with gr.Group(visible=k == first) as group:
            kind_values[k] = pipeline_form.kind_widgets(k)
        groups.append(group)
    data = gr.Radio(DATA_CHOICES, value="active", label="Preference pairs", visible=False,
                    elem_id="pipe-data")  # fmt: skip
    with gr.Group(visible=False) as judge_box:
        judge = llm_form.llm_form("pipe-judge", "judge", runs_dir=ctx.runs_dir)
    with gr.Accordion("Training settings", open=False, visible=True) as args_box:
        use_defaults, args_values = _args_widgets()
    with gr.Group(visible=False) as rewards_box:  # a reinforce step's
        rewards = build_rewards(ctx.profile, prefix="pipe", dry_run=False).rewards
    steps = gr.State([])
    listing = gr.Radio([], value=None, label="Steps", type="value", elem_id="pipe-steps")
    with gr.Row():
        up = gr.Button("Up", size="sm", elem_id="pipe-up")
        down = gr.Button("Down", size="sm", elem_id="pipe-down")
        drop = gr.Button("Remove", size="sm", elem_id="pipe-remove")
    check = gr.HTML(present.hint_html(NO_STEPS), elem_id="pipe-check")
    error = gr.HTML(elem_id="pipe-builder-error")
    edited = [steps, listing, check, error]
    kind.change(show_kind, kind, [*groups, data, judge_box, args_box, rewards_box])
    form = {"steps": steps, "kind": kind, "mapped": ctx.mapped, "data": data, "rewards": rewards,
            "use_defaults": use_defaults, "judge": judge.form, "fields": kind_values,
            "args": args_values}  # fmt: skip
    add.click(named.handler(partial(add_step, runs_dir=ctx.runs_dir), form), named.inputs(form),
              edited)  # fmt: skip
    up.click(partial(move_step, delta=-1), [steps, listing], edited)
    down.click(partial(move_step, delta=1), [steps, listing], edited)
    drop.click(remove_step, [steps, listing], edited)
    return Builder(steps, check, error)
