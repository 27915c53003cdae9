"""The settings widgets of each pipeline step kind, generated from the step dataclasses
(`dragonfarm_core.pipelines.steps.KINDS`), and their values read back into a step.

Every field of a step's dataclass gets a widget by its declared type, as `ui.settings_form`
does for the Train tab's settings: a checkbox for a bool, a number box for int and float, a
dropdown where the field has a fixed set of choices, a text box otherwise (empty: None). The
fields that are not plain values come from elsewhere on the page: the dataset (the app's
active mapped dataset, or none for a prefer step after a synthesis), the judge (`ui.llm_form`),
the training settings (one shared TrainArgs group, or those recommended for the model), a reinforce
step's rewards (a rewards builder of the page's own) and the LoRA (its defaults).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

import gradio as gr

from dragonfarm_core.pipelines.steps import KINDS, Step

# The kinds the builder offers: every step kind.
KIND_CHOICES = [
    ("Train (SFT)", "train"),
    ("Prefer (DPO / ORPO)", "prefer"),
    ("Reinforce (GRPO, with rewards)", "reinforce"),
    ("Synthesize preference pairs", "synthesize_pairs"),
    ("Judge against the base model", "judge"),
    ("Evaluate", "evaluate"),
    ("Merge", "merge"),
    ("Publish to the Hub", "publish"),
]
FROM_PAGE = frozenset({"dataset", "lora", "args", "judge", "rewards"})
CHOICES = {"method": ("dpo", "orpo"), "what": ("merged", "adapter")}
HELP = {
    "n_samples": "Held-out prompts the run answers at the end (its samples).",
    "group_size": "Completions sampled per prompt; each is scored against its group's mean.",
    "method": "DPO or ORPO.",
    "beta": "How far the model may move from where it started (0.1 is a sensible start).",
    "prompts": "train or eval: the latest run's rows.",
    "n": "How many prompts.",
    "n_samples_per_prompt": "Replies sampled per prompt; the judge ranks them.",
    "min_gap": "Keep a pair only when its replies' scores differ by this much.",
    "rubric": "What the judge looks for (empty: the built-in rubric).",
    "temperature": "Sampling temperature.",
    "max_new_tokens": "Longest reply, in tokens.",
    "against": "base (the model it started from), a run id, or empty: rubric scores only.",
    "metrics": "Metric names, comma-separated; empty: every built-in metric that fits.",
    "out": "Folder for the merged model (empty: <run>/merged/).",
    "repo": "The Hub repository, e.g. you/support-model.",
    "what": "The merged model or the adapter.",
    "private": "Create the repository as private.",
    "commit_message": "Empty: a message naming the run.",
}


def form_fields(kind: str) -> list[dataclasses.Field]:
    """The fields of a step kind the form shows (the plain values), in field order."""
    return [f for f in dataclasses.fields(KINDS[kind]) if f.name not in FROM_PAGE]


def _default(field: dataclasses.Field) -> Any:
    return None if field.default is dataclasses.MISSING else field.default


def _text(value: Any) -> str:
    return "" if value is None or value is True else str(value)


def field_widget(kind: str, field: dataclasses.Field, hint: Any) -> gr.Component:
    """The widget of one step field."""
    default = _default(field)
    kwargs: dict[str, Any] = {"label": field.name.replace("_", " ").capitalize(),
                              "info": HELP.get(field.name, ""),
                              "elem_id": f"pipe-{kind}-{field.name}"}  # fmt: skip
    if field.name in CHOICES:
        return gr.Dropdown(list(CHOICES[field.name]), value=default, **kwargs)
    if hint is bool:
        return gr.Checkbox(value=bool(default), **kwargs)
    if hint in (int, float):
        return gr.Number(value=default, precision=0 if hint is int else None, **kwargs)
    return gr.Textbox(value=_text(default), max_lines=3, **kwargs)


def kind_widgets(kind: str) -> dict[str, gr.Component]:
    """One widget per shown field of the kind, keyed by field name, three to a row."""
    fields, hints = form_fields(kind), typing.get_type_hints(KINDS[kind])
    widgets: dict[str, gr.Component] = {}
    for start in range(0, len(fields), 3):
        with gr.Row():
            for f in fields[start : start + 3]:
                widgets[f.name] = field_widget(kind, f, hints[f.name])
    return widgets


def read_value(kind: str, field: dataclasses.Field, hint: Any, value: Any) -> Any:
    """A widget's value as the step field takes it; an empty number raises, naming it."""
    if hint in (int, float):
        if value is None or value == "":
            raise ValueError(f"{kind}: {field.name} is empty; enter a number.")
        return int(value) if hint is int else float(value)
    if hint is bool:
        return bool(value)
    text = "" if value is None else str(value).strip()
    if field.name == "metrics":
        names = [part.strip() for part in text.split(",") if part.strip()]
        return tuple(names) if names else True
    return text or None


def read_fields(kind: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """`kind_widgets(kind)`'s values, by field name -> the step's keywords."""
    if kind not in KINDS:
        raise ValueError(f"Unknown step kind {kind!r}; one of {', '.join(KINDS)}.")
    fields, hints = form_fields(kind), typing.get_type_hints(KINDS[kind])
    if set(values) != {f.name for f in fields}:
        raise ValueError(f"{kind} step values: expected {[f.name for f in fields]}, "
                         f"got {sorted(values)}.")  # fmt: skip
    return {f.name: read_value(kind, f, hints[f.name], values[f.name]) for f in fields}


def make_step(kind: str, fields: dict[str, Any], **page: Any) -> Step:
    """The step: its fields, plus what comes from the page (dataset, args, judge) where the
    kind has such a field."""
    cls = KINDS[kind]
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**fields, **{k: v for k, v in page.items() if k in names})


def _shown(value: Any) -> str:
    if value is True:
        return "all"
    return ", ".join(map(str, value)) if isinstance(value, tuple) else str(value)


def settings_text(step: Step) -> list[str]:
    """What the page gave a step (its dataset, judge), then the settings that differ from the
    kind's defaults, as "name: value"."""
    out, changed = [], []
    for f in dataclasses.fields(step):
        value = getattr(step, f.name)
        if f.name == "dataset":
            out.append("dataset: " + ("synthesized pairs" if value is None else value.name))
        elif f.name == "judge" and value is not None:
            described = value if isinstance(value, str) else getattr(value, "provider", "judge")
            out.append(f"judge: {described}")
        elif f.name not in FROM_PAGE and value != _default(f):
            changed.append(f"{f.name}: {_shown(value)}")
    return out + changed
