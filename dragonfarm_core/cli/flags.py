"""Command-line flags generated from the settings dataclasses, and `--reward TYPE:key=value`.

Each field of a settings group (Lora, TrainArgs, Hardware, a method's own group) becomes one
flag, so the command line, the Train tab and the Python API never disagree: the name comes from
the field (`Lora.r` -> --lora-r, `TrainArgs.learning_rate` -> --learning-rate), the value's kind
and choices from its annotation and metadata, the help from its metadata (help text, limits)
and from the defaults of every method that uses it. Flags that are not given are absent from
the parsed namespace (argparse.SUPPRESS): the method's own defaults fill them in, and the
dataclass validates the result and names the field when a value is wrong.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import types
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dragonfarm_core.rewards import Reward, RewardError, reward
from dragonfarm_core.settings import SettingsError


@dataclass(frozen=True)
class Group:
    """One settings dataclass as flags: `defaults` holds, for each method that uses it, the
    values that method starts from. A field with no default there (GRPO's rewards) gets no
    flag: the command fills it in from its own flags."""

    cls: type
    title: str
    prefix: str
    defaults: dict[str, dict[str, Any]]


def values_of(settings: Any) -> dict[str, Any]:
    """{field: value} of a settings instance (what a method starts from)."""
    return {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}


def field_defaults(cls: type) -> dict[str, Any]:
    """{field: default} of a settings class; fields without one are left out."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _kinds(hint: Any) -> set[Any]:
    return set(typing.get_args(hint)) if isinstance(hint, types.UnionType) else {hint}


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def _optional_whole(text: str) -> int | None:
    return None if text.strip().lower() in ("", "none") else _whole(text)


def _count_or_text(text: str) -> int | str:
    return int(text) if text.strip().isdigit() else text


def _names(text: str) -> str | tuple[str, ...]:
    """'auto' -> 'auto'; 'q_proj, v_proj' -> ('q_proj', 'v_proj') (as the Train tab reads it)."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    return names[0] if len(names) == 1 else tuple(names)


def _key_value(text: str) -> tuple[str, Any]:
    """'packing=true' -> ('packing', True): a JSON value, else the text as a string."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    try:
        return key.strip(), json.loads(value)
    except ValueError:
        return key.strip(), value


def _argument(hint: Any, meta: Any) -> dict[str, Any]:
    """add_argument keywords for a field of this type and metadata."""
    kinds = _kinds(hint)
    if meta.get("choices"):
        return {"choices": list(meta["choices"])}
    if hint is bool:
        return {"action": argparse.BooleanOptionalAction}
    if {int, str} <= kinds:  # Hardware.devices: a count, or GPUs ('cuda:0,1')
        return {"type": _count_or_text, "metavar": "N|cuda:I,J"}
    if kinds & {int, float}:
        if float in kinds:
            return {"type": _number, "metavar": "N"}
        return {"type": _optional_whole if type(None) in kinds else _whole, "metavar": "N"}
    if typing.get_origin(hint) is dict or hint is dict:
        return {"type": _key_value, "action": "append", "metavar": "KEY=VALUE"}
    if any(typing.get_origin(k) is tuple for k in kinds):
        return {"type": _names, "metavar": "NAMES"}
    return {"type": str}


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, dict):
        return "none" if not value else ",".join(f"{k}={json.dumps(v)}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:g}"
    return "none" if value is None else str(value)


Uses = list[tuple[Group, dataclasses.Field[Any]]]


def _defaults_text(uses: Uses, methods: Sequence[str]) -> str:
    """'default: 3' or 'default: sft 3; dpo, orpo 2; grpo 1'; 'grpo only' where it is."""
    by_value: dict[str, list[str]] = {}
    for group, field in uses:
        for method, values in group.defaults.items():
            by_value.setdefault(_shown(values[field.name]), []).append(method)
    used = [m for m in methods if any(m in ms for ms in by_value.values())]
    only = f"{', '.join(used)} only; " if len(used) < len(methods) else ""
    if len(by_value) == 1:
        return f"{only}default: {next(iter(by_value))}"
    parts = [f"{', '.join(ms)} {value}" for value, ms in by_value.items()]
    return f"{only}default: {'; '.join(parts)}"


def _limits(meta: Any) -> str:
    lo, hi = meta.get("min"), meta.get("max")
    return f" {_shown(lo)} to {_shown(hi)}." if lo is not None and hi is not None else ""


def flag_name(group: Group, field: dataclasses.Field[Any]) -> str:
    return f"--{group.prefix}{field.name.replace('_', '-')}"


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def _flagged(group: Group) -> list[dataclasses.Field[Any]]:
    every = group.defaults.values()
    return [f for f in dataclasses.fields(group.cls) if all(f.name in d for d in every)]


def _fields(groups: Iterable[Group]) -> dict[str, Uses]:
    """{flag: [(group, field), ...]}: a flag two groups share (GRPO's and DPO's --beta) is one."""
    out: dict[str, Uses] = {}
    for group in groups:
        for field in _flagged(group):
            out.setdefault(flag_name(group, field), []).append((group, field))
    return out


def _help(uses: Uses, methods: Sequence[str]) -> str:
    """The field's help and limits (each method's, where a shared flag means two things), then
    the defaults; '%' escaped for argparse."""
    by_text: dict[str, list[str]] = {}  # each help text, and the methods it is for
    for group, f in uses:
        text = f.metadata.get("help", "").rstrip(".") + "." + _limits(f.metadata)
        by_text.setdefault(text, []).extend(group.defaults)
    parts = list(by_text)
    if len(parts) > 1:
        parts = [f"{', '.join(ms)}: {text}" for text, ms in by_text.items()]
    return f"{' '.join(parts)} ({_defaults_text(uses, methods)})".replace("%", "%%")


def add_flags(
    parser: argparse.ArgumentParser, groups: Sequence[Group], methods: Sequence[str]
) -> None:
    """One flag per field of each group (in field order, an argparse group per title)."""
    sections: dict[str, Any] = {}
    for flag, uses in _fields(groups).items():
        group, field = uses[0]
        hint = typing.get_type_hints(group.cls)[field.name]
        text = _help(uses, methods)
        section = sections.get(group.title) or parser.add_argument_group(group.title)
        sections[group.title] = section
        kind = _argument(hint, field.metadata)
        if "choices" in kind:  # a flag two groups share takes the choices of both (--loss-type)
            kind["choices"] = list(dict.fromkeys(c for _, f in uses for c in f.metadata["choices"]))
        section.add_argument(flag, dest=_dest(flag), default=argparse.SUPPRESS, help=text, **kind)


def given_flags(args: argparse.Namespace, groups: Sequence[Group]) -> list[str]:
    """The flags of these groups that the command line set."""
    return [flag for flag in _fields(groups) if hasattr(args, _dest(flag))]


def read_group(
    args: argparse.Namespace, group: Group, method: str, base: dict[str, Any] | None = None,
    **filled: Any,
) -> Any:  # fmt: skip
    """The group's settings for `method`: `base` (else its defaults), the flags given on top,
    and `filled` (the fields that have no flag)."""
    values = {**(group.defaults[method] if base is None else base), **filled}
    for field in _flagged(group):
        dest = _dest(flag_name(group, field))
        if hasattr(args, dest):
            value = getattr(args, dest)
            if isinstance(value, list):  # KEY=VALUE pairs of a dict field, on top of its default
                value = {**values[field.name], **dict(value)}
            values[field.name] = value
    try:
        return group.cls(**values)
    except SettingsError as e:
        raise SettingsError(f"{e}{_flag_hint(str(e), group)}") from None


def _flag_hint(message: str, group: Group) -> str:
    """' (flag --lora-r)' for a message about Lora.r, so the error names what to change."""
    for field in dataclasses.fields(group.cls):
        qualified = rf"\b{group.cls.__name__}\.{field.name}\b"
        if re.search(qualified, message) or message.startswith(f"{field.name} "):
            return f" (flag {flag_name(group, field)})"
    return ""


# --- rewards -------------------------------------------------------------------------------

# A comma starts the next option only where `name=` follows, so a pattern such as \d{1,3} keeps
# its comma, and keys=id,status is one option with two names.
_OPTION = re.compile(r",(?=\s*[A-Za-z_][A-Za-z0-9_-]*\s*=)")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _reward_value(name: str, hint: Any, text: str) -> Any:
    kinds = _kinds(hint)
    if hint is bool:
        if text.strip().lower() not in _TRUE + _FALSE:
            raise RewardError(f"Reward.{name} must be true or false, got {text!r}.")
        return text.strip().lower() in _TRUE
    if kinds & {int, float}:
        converter = _whole if float not in kinds else _number
        try:
            return converter(text)
        except argparse.ArgumentTypeError as e:
            raise RewardError(f"Reward.{name}: {e}.") from None
    if any(typing.get_origin(k) is tuple for k in kinds) and name != "command":
        return tuple(part.strip() for part in text.split(",") if part.strip())
    return text  # a command is split like shell words by the Reward itself


def parse_reward(text: str) -> Reward:
    """`regex:pattern=^T-\\d{4},weight=2` -> dragon.reward("regex", pattern=..., weight=2.0).

    An argparse type: a bad reward is an ArgumentTypeError whose message names the option.
    """
    kind, _, rest = text.partition(":")
    hints = typing.get_type_hints(Reward)
    options: dict[str, Any] = {}
    try:
        for part in _OPTION.split(rest) if rest.strip() else []:
            key, sep, value = part.partition("=")
            key = key.strip().replace("-", "_")
            if not sep or key not in hints or key == "type":
                known = ", ".join(f.name for f in dataclasses.fields(Reward) if f.name != "type")
                raise RewardError(
                    f"{part.strip()!r} is not an option of a reward; write "
                    f"TYPE:name=value,... with names from: {known}."
                )
            options[key] = _reward_value(key, hints[key], value)
        return reward(kind.strip(), **options)
    except RewardError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None
