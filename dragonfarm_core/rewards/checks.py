"""Validation of `Reward` settings, run by `Reward.__post_init__`.

Every error names the field (`Reward.pattern ...`), says what is wrong and what to do. Besides
types and ranges it checks what would otherwise fail mid-training: a command's program must be
installed here, a custom file must import and define its function.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

from dragonfarm_core.rewards import command as command_reward
from dragonfarm_core.rewards import custom as custom_reward
from dragonfarm_core.rewards import runner
from dragonfarm_core.rewards.custom_run import CUSTOM_TIMEOUT_S
from dragonfarm_core.rewards.errors import RewardError, RewardTimeout

if TYPE_CHECKING:
    from dragonfarm_core.rewards.spec import Reward

# The optional fields each type reads. Setting another one is a mistake worth reporting.
OPTIONS: dict[str, tuple[str, ...]] = {
    "exact": (),
    "contains": (),
    "numeric": (),
    "regex": ("pattern", "case_sensitive"),
    "json": ("keys",),
    "length": ("min_chars", "max_chars"),
    "keyword": ("words", "mode", "case_sensitive"),
    "command": ("command", "input", "score_from", "min_score", "max_score", "timeout"),
    "custom": ("file", "fn"),
}


def check_number(r: Reward, name: str, minimum: float | None = None) -> None:
    value = getattr(r, name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RewardError(f"Reward.{name} must be a finite number, got {value!r}.")
    if minimum is not None and value < minimum:
        raise RewardError(f"Reward.{name} = {value} is below {minimum}.")


def _check_choice(r: Reward, name: str) -> None:
    choices = next(f.metadata["choices"] for f in dataclasses.fields(r) if f.name == name)
    if getattr(r, name) not in choices:
        raise RewardError(
            f"Reward.{name} = {getattr(r, name)!r} is not one of {', '.join(choices)}."
        )


def _check_unused_options(r: Reward) -> None:
    used = set(OPTIONS[r.type]) | {"type", "weight", "name"}
    for f in dataclasses.fields(r):
        if f.name not in used and getattr(r, f.name) != f.default:
            users = [t for t, opts in OPTIONS.items() if f.name in opts]
            raise RewardError(
                f"Reward.{f.name} is not used by type {r.type!r} (only by "
                f"{', '.join(users)}); remove it or change the type."
            )


def _check_strings(r: Reward, name: str) -> None:
    value = getattr(r, name)
    if not value or not all(isinstance(v, str) and v for v in value):
        raise RewardError(
            f"Reward.{name} must be a non-empty list of non-empty strings for "
            f"type {r.type!r}, got {value!r}."
        )


def _validate_regex(r: Reward) -> None:
    if not isinstance(r.pattern, str) or not r.pattern:
        raise RewardError("Reward.pattern is required for type 'regex', e.g. pattern=r'^T-\\d{4}'.")
    try:
        re.compile(r.pattern)
    except re.error as e:
        raise RewardError(
            f"Reward.pattern {r.pattern!r} is not a valid regular expression: {e}."
        ) from e
    if not isinstance(r.case_sensitive, bool):
        raise RewardError("Reward.case_sensitive must be True or False.")


def _validate_json(r: Reward) -> None:
    if r.keys is not None:
        _check_strings(r, "keys")


def _validate_length(r: Reward) -> None:
    if r.min_chars is None and r.max_chars is None:
        raise RewardError("Reward type 'length' needs min_chars, max_chars or both.")
    for name in ("min_chars", "max_chars"):
        value = getattr(r, name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            raise RewardError(f"Reward.{name} must be a whole number >= 0, got {value!r}.")
    if r.min_chars is not None and r.max_chars is not None and r.min_chars > r.max_chars:
        raise RewardError(
            f"Reward.min_chars ({r.min_chars}) is above Reward.max_chars ({r.max_chars})."
        )


def _validate_keyword(r: Reward) -> None:
    _check_strings(r, "words")
    _check_choice(r, "mode")
    if not isinstance(r.case_sensitive, bool):
        raise RewardError("Reward.case_sensitive must be True or False.")


def _validate_command(r: Reward) -> None:
    if r.command is None:
        raise RewardError(
            "Reward.command is required for type 'command', e.g. "
            'command=["pytest", "-q", "{completion_file}"], input="file".'
        )
    _check_choice(r, "input")
    _check_choice(r, "score_from")
    command_reward.check_command(r.command, r.input)
    check_number(r, "min_score")
    check_number(r, "max_score")
    if r.max_score <= r.min_score:
        raise RewardError(
            f"Reward.max_score ({r.max_score}) must be above Reward.min_score ({r.min_score})."
        )
    check_number(r, "timeout", minimum=0.1)


def _validate_custom(r: Reward) -> None:
    if not r.file:
        raise RewardError(
            "Reward.file is required for type 'custom': the path of a Python file "
            "defining reward(prompt, completion, reference, row)."
        )
    if not isinstance(r.fn, str) or not r.fn.isidentifier():
        raise RewardError(f"Reward.fn {r.fn!r} must be a Python function name.")
    object.__setattr__(r, "file", str(Path(r.file).resolve()))
    if not Path(r.file).is_file():
        custom_reward.load_function(r.file, r.fn)  # says that it does not exist, and what to give
    # Imported in the reward helper with a time limit: the file's top-level code is the user's,
    # and the app must not run it (custom_run).
    loaded = runner.custom(r.file, r.fn, [], CUSTOM_TIMEOUT_S)[0]
    if loaded is None:
        raise RewardTimeout(
            f"Reward.file {r.file!r} took longer than {CUSTOM_TIMEOUT_S:g} s to import, so it "
            "was stopped: move slow work (loading a model, reading a large file) into the "
            "function, or out of the file."
        )
    if "error" in loaded:
        raise RewardError(loaded["error"])


VALIDATORS = {
    "regex": _validate_regex,
    "json": _validate_json,
    "length": _validate_length,
    "keyword": _validate_keyword,
    "command": _validate_command,
    "custom": _validate_custom,
}


def validate(r: Reward) -> None:
    """Raise RewardError for the first problem with `r`'s type-specific settings."""
    _check_unused_options(r)
    check = VALIDATORS.get(r.type)
    if check is not None:
        check(r)
