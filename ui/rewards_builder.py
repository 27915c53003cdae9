"""The GRPO rewards builder in the Train tab: pick a reward type, fill in its fields, add it.

The type-specific widgets are generated from `Reward`'s fields and their metadata (label, help,
choices) by `ui.settings_form`, and `OPTIONS` says which fields each type reads, so the builder and `dragon.reward`
never disagree. The added rewards live in a `gr.State` as `Reward` objects, built with
`dragon.reward(...)` exactly as a person would in Python. `build_rewards()` creates the widgets
and wires Add and Remove; the Train tab wires the dry run, which needs its mapping and GRPO
settings. The Pipelines tab has a builder of its own for its reinforce steps (another `prefix`
for its element ids, no dry run).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.auth.profiles import Profile, get_profile
from dragonfarm_core.rewards import TYPES, Reward, RewardError, reward_names
from dragonfarm_core.rewards.checks import OPTIONS
from ui import named, present
from ui.settings_form import field_widget, optional_number

REWARD_TYPES = {
    "exact": "exact: equals the reference answer",
    "contains": "contains: the reference answer appears in it",
    "numeric": "numeric: its last number equals the reference's",
    "regex": "regex: matches a pattern",
    "json": "json: valid JSON, with the required keys",
    "length": "length: within a character budget",
    "keyword": "keyword: has any (or all) of some words",
    "command": "command: a program scores it (tests, a linter)",
    "custom": "custom: a Python function in a file",
}
# Reward fields that only some types read, in field order (type, weight and name are apart).
REWARD_OPTIONS = [
    f for f in dataclasses.fields(Reward) if any(f.name in names for names in OPTIONS.values())
]


@dataclass(frozen=True)
class RewardsBuilder:
    """The builder's components the Train tab wires: the rewards added, and the dry run's."""

    rewards: gr.State  # list[Reward]
    dry_run: gr.Button | None  # None in a builder made without one
    dry_outputs: list[gr.Component]  # score table, summary, code, message: the dry run's order


# What the builder adds to a field's help.
MORE_HELP = {
    "keys": " Separate them with commas.",
    "words": " Separate them with commas.",
    "command": " Type it as in a terminal; it never runs through a shell.",
}


def _reward_widget(
    field: dataclasses.Field, hint: Any, visible: bool, prefix: str = "train"
) -> gr.Component:
    return field_widget(
        field, hint, field.default, choice=gr.Radio, visible=visible,
        info=field.metadata["help"] + MORE_HELP.get(field.name, ""),
        elem_id=f"{prefix}-reward-{field.name}",
    )  # fmt: skip


def reward_widgets(shown_type: str = "regex", prefix: str = "train") -> dict[str, gr.Component]:
    """One widget per type-specific Reward field, keyed by field name, in REWARD_OPTIONS
    order; those that `shown_type` reads are visible."""
    hints = typing.get_type_hints(Reward)
    return {f.name: _reward_widget(f, hints[f.name], f.name in OPTIONS[shown_type], prefix)
            for f in REWARD_OPTIONS}  # fmt: skip


def show_reward_fields(reward_type: str) -> list[Any]:
    """The fields the chosen reward type reads become visible; the others hide (one update per
    `reward_widgets` widget, in its order)."""
    return [gr.update(visible=f.name in OPTIONS[reward_type]) for f in REWARD_OPTIONS]


def build_reward(
    reward_type: str, weight: float | None, name: str | None, values: Mapping[str, Any]
) -> Reward:
    """The builder's widgets -> `dragon.reward(...)`; `values` holds the type-specific fields'
    values by field name (one left out is empty). Only the type's own fields are passed, and an
    empty box means "not set". Invalid settings raise RewardError naming the field."""
    if reward_type not in TYPES:
        raise RewardError(f"Choose a reward type: one of {', '.join(TYPES)}.")
    if weight is None:
        raise RewardError("Reward.weight is empty; enter a number (1 counts it fully).")
    unknown = sorted(set(values) - {f.name for f in REWARD_OPTIONS})
    if unknown:
        raise ValueError(f"Not a reward option: {', '.join(unknown)}.")
    hints, options = typing.get_type_hints(Reward), dict[str, Any]()
    for field in REWARD_OPTIONS:
        if field.name not in OPTIONS[reward_type]:
            continue
        value: Any = values.get(field.name)
        hint = hints[field.name]
        optional = type(None) in typing.get_args(hint)
        if optional and {int, float} & set(typing.get_args(hint)) and isinstance(value, str):
            value = optional_number(Reward, field, hint, value)  # a text box: "" is None
        if isinstance(value, str):
            value = value.strip()
        if value is None or value == "" or (optional and value == 0):
            continue  # empty box (an emptied number box arrives as 0)
        if field.name in ("keys", "words"):
            value = tuple(part.strip() for part in value.split(",") if part.strip())
        options[field.name] = value
    return dragon.reward(reward_type, weight=weight, name=(name or "").strip() or None, **options)


def _rewards_view(rewards: list[Reward]) -> tuple[Any, Any]:
    names = reward_names(rewards)
    return present.rewards_table(rewards, names), gr.update(choices=names, value=None)


def add_reward(
    rewards: list[Reward] | None, reward_type: str, weight: float | None, name: str | None,
    values: Mapping[str, Any], *, profile: Profile | None = None,
) -> tuple[Any, ...]:  # fmt: skip
    """Add -> (rewards, rewards table, remove picker, message). The widgets keep their values,
    so a similar reward is one change away. A type the profile turns off is refused (the
    dropdown does not offer it, but an API call can name it)."""
    refused = (profile or get_profile("local")).reward_refusal(reward_type)
    if refused:
        return gr.skip(), gr.skip(), gr.skip(), present.error_html(f"Reward not added: {refused}")
    try:
        added = [*(rewards or []), build_reward(reward_type, weight, name, values)]
        table, picker = _rewards_view(added)  # two rewards with one name are refused here
    except (RewardError, ValueError, TypeError) as e:
        return gr.skip(), gr.skip(), gr.skip(), present.error_html(f"Reward not added: {e}")
    return added, table, picker, ""


def remove_reward(rewards: list[Reward] | None, which: str | None) -> tuple[Any, ...]:
    """Remove -> (rewards, rewards table, remove picker, message)."""
    rewards = rewards or []
    names = reward_names(rewards)
    if which not in names:
        return gr.skip(), gr.skip(), gr.skip(), present.error_html("Pick a reward to remove.")
    kept = [r for r, name in zip(rewards, names, strict=True) if name != which]
    return (kept, *_rewards_view(kept), "")


def offered_types(profile: Profile) -> list[tuple[str, str]]:
    """(label, type) for the reward types this profile allows."""
    return [(label, t) for t, label in REWARD_TYPES.items() if not profile.reward_refusal(t)]


def build_rewards(profile: Profile, prefix: str = "train", dry_run: bool = True) -> RewardsBuilder:
    """The rewards builder's widgets, with Add and Remove wired; element ids start with
    `prefix`; `dry_run`: with the dry run's button and outputs (for the caller to wire)."""
    rewards = gr.State([])
    intro = "**Rewards**: each scores a completion; GRPO maximises their weighted sum."
    off = [t for t in REWARD_TYPES if profile.reward_refusal(t)]
    if off:
        intro += f" ({' and '.join(off)} rewards are off here: {profile.off['user_code']})"
    gr.Markdown(intro)
    with gr.Row():
        reward_type = gr.Dropdown(
            offered_types(profile),
            value="regex",
            label="Reward type",
            elem_id=f"{prefix}-reward-type",
            scale=2,
        )
        weight = gr.Number(
            1, label="Weight", info=_help("weight"), elem_id=f"{prefix}-reward-weight"
        )
        reward_name = gr.Textbox(
            label="Name (optional)", info=_help("name"), elem_id=f"{prefix}-reward-name"
        )
    options = reward_widgets(reward_type.value, prefix)
    add = gr.Button("Add reward", elem_id=f"{prefix}-reward-add")
    table = gr.Dataframe(
        present.rewards_table([], []),
        label="Rewards added",
        interactive=False,
        wrap=True,
        elem_id=f"{prefix}-rewards",
    )
    with gr.Row():
        pick = gr.Dropdown([], label="Reward to remove", scale=2, elem_id=f"{prefix}-reward-pick")
        remove = gr.Button("Remove", elem_id=f"{prefix}-reward-remove")
        dry = (
            gr.Button("Dry run: score a few completions", elem_id=f"{prefix}-reward-dry-run")
            if dry_run
            else None
        )
    message = gr.HTML(elem_id=f"{prefix}-reward-error")
    changed = [rewards, table, pick, message]
    reward_type.change(show_reward_fields, reward_type, list(options.values()))
    form = {"rewards": rewards, "reward_type": reward_type, "weight": weight,
            "name": reward_name, "values": options}  # fmt: skip
    add.click(named.handler(partial(add_reward, profile=profile), form), named.inputs(form),
              changed)  # fmt: skip
    remove.click(remove_reward, [rewards, pick], changed)
    if dry is None:
        return RewardsBuilder(rewards, None, [])
    summary = gr.Markdown(elem_id=f"{prefix}-dry-run-summary")
    scores = gr.Dataframe(
        label="Dry run: sampled completions and their scores",
        interactive=False,
        wrap=True,
        visible=False,
        elem_id=f"{prefix}-dry-run",
    )
    with gr.Accordion("Python for the dry run", open=False):
        dry_code = gr.Code(
            "", language="python", interactive=False, show_line_numbers=False,
            elem_id=f"{prefix}-dry-run-code",
        )  # fmt: skip

    return RewardsBuilder(rewards, dry, [scores, summary, dry_code, message])


def _help(field_name: str) -> str:
    return next(f.metadata["help"] for f in dataclasses.fields(Reward) if f.name == field_name)
