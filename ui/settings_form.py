"""Widgets generated from settings dataclasses, and their values read back into them.

Each field's metadata (`label`, `help`, `min`, `max`, `choices`, `step`) gives its widget, and
its declared type says which kind: a dropdown for choices, a checkbox for a bool, a number box
for int and float (whole numbers for int), a text box otherwise. The Train tab builds its
`Lora`, `TrainArgs`, `Hardware`, `PreferenceArgs` and `ReinforceArgs` widgets here, the rewards
builder its `Reward` fields, so the app and the Python API never disagree.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import gradio as gr

from dragonfarm_core import SettingsError

# Free-form trainer keywords; GRPO's own builder; several devices, which the Python API sets
# (Hardware(devices=..., accelerate_config=...)), not the Train tab.
NOT_SHOWN = frozenset({"extra", "rewards", "devices", "accelerate_config"})


def shown_fields(cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if f.name not in NOT_SHOWN]


def _number_step(hint: Any, meta: Mapping[str, Any], default: Any) -> float:
    if meta.get("step") is not None:
        return meta["step"]
    if hint is int or not default:
        return 1
    # Arrow clicks move a small default (a learning rate) by its own order of magnitude.
    return 1 if default >= 1 else 10 ** math.floor(math.log10(default))


def _limit(value: float) -> str:
    """1e-08, 0.5, 512, 4,294,967,295."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def field_widget(
    field: dataclasses.Field, hint: Any, default: Any, choice: type = gr.Dropdown, **kwargs: Any
) -> gr.Component:
    """The widget of one field; `kwargs` (elem_id, visible, ...) go to the component."""
    meta = field.metadata
    kwargs = {"label": meta["label"], "info": meta["help"], **kwargs}
    if meta.get("choices"):
        return choice(list(meta["choices"]), value=default, **kwargs)
    if hint is bool:
        return gr.Checkbox(value=default, **kwargs)
    numbers = [t for t in typing.get_args(hint) or (hint,) if t in (int, float)]
    if numbers:
        lo, hi = meta.get("min"), meta.get("max")
        if lo is not None and hi is not None:
            kwargs["info"] += f" ({_limit(lo)} to {_limit(hi)})"
        if _optional(hint):
            # Gradio's number box shows an empty value as 0 ("Max steps: 0" beside "empty: run
            # all epochs"), so a field that may be empty is a text box; read_group parses it.
            text = "" if default is None else _limit(default).replace(",", "")
            return gr.Textbox(value=text, placeholder="empty", max_lines=1, **kwargs)
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
    return gr.Textbox(value="" if text is None else text, **kwargs)


def settings_fields(
    cls: type, values: Any = None, only: Sequence[str] | None = None
) -> dict[str, gr.Component]:
    """One widget per shown field of a settings dataclass (or of those named in `only`), keyed
    by field name, three to a row, holding `values` (an instance of `cls`; default: `cls()`)."""
    defaults, hints = cls() if values is None else values, typing.get_type_hints(cls)
    fields = [f for f in shown_fields(cls) if only is None or f.name in only]
    widgets: dict[str, gr.Component] = {}
    for start in range(0, len(fields), 3):
        with gr.Row():
            for f in fields[start : start + 3]:
                elem_id = f"train-{cls.__name__.lower()}-{f.name}"
                widgets[f.name] = field_widget(
                    f, hints[f.name], getattr(defaults, f.name), elem_id=elem_id
                )
    return widgets


def settings_widgets(
    cls: type, values: Any = None, only: Sequence[str] | None = None
) -> list[gr.Component]:
    """`settings_fields`' widgets, in field order."""
    return list(settings_fields(cls, values, only).values())


def _optional(hint: Any) -> bool:
    return type(None) in typing.get_args(hint)


def optional_number(cls: type, field: dataclasses.Field, hint: Any, text: str) -> Any:
    """The text box of an `int | None` or `float | None` field: empty is None."""
    text = text.strip().replace(",", "").replace("_", "")
    if not text:
        return None
    whole = float not in typing.get_args(hint)
    try:
        return int(text) if whole else float(text)
    except ValueError:
        kind = "a whole number" if whole else "a number"
        raise SettingsError(
            f"{cls.__name__}.{field.name} ({field.metadata['label']}) is {text!r}; "
            f"enter {kind}, or leave it empty."
        ) from None


def _field_value(cls: type, field: dataclasses.Field, hint: Any, value: Any) -> Any:
    numbers = {int, float} & set(typing.get_args(hint))
    if _optional(hint) and numbers and isinstance(value, str):
        return optional_number(cls, field, hint, value)
    if _optional(hint) and value == 0 and not isinstance(value, bool):
        return None  # an emptied number box arrives as 0; here that means "none"
    if value is None and not _optional(hint):
        raise SettingsError(
            f"{cls.__name__}.{field.name} ({field.metadata['label']}) is empty; enter a value."
        )
    if isinstance(value, str) and typing.get_origin(hint) is not None:  # str | tuple[str, ...]
        names = [part.strip() for part in value.split(",") if part.strip()]
        return names[0] if len(names) == 1 else tuple(names)
    return value


def read_group(cls: type, values: Mapping[str, Any], **more: Any) -> Any:
    """The values of `settings_fields(cls)`, keyed by field name, -> `cls(...)` (with `more`
    keywords). An empty box or an invalid value raises SettingsError naming the field."""
    hints, fields = typing.get_type_hints(cls), {f.name: f for f in shown_fields(cls)}
    if set(values) != set(fields):
        missing, unknown = sorted(set(fields) - set(values)), sorted(set(values) - set(fields))
        raise ValueError(f"{cls.__name__} values: missing {missing}, unknown {unknown}.")
    read = {name: _field_value(cls, fields[name], hints[name], v) for name, v in values.items()}
    return cls(**read, **more)
