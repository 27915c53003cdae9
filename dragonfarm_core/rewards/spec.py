"""`Reward`: what `dragon.reward(...)` returns and `config.json` stores for a GRPO run.

A frozen settings object like `Lora` or `TrainArgs`: one field per argument of the manual's
`dragon_reward`, with UI metadata, validated in `__post_init__` (by `checks.py`) with errors
that name the field. Also: unique names for progress columns, and the copy of a custom reward's
file into the run directory.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dragonfarm_core.rewards import checks
from dragonfarm_core.rewards import command as command_reward
from dragonfarm_core.rewards import custom as custom_reward
from dragonfarm_core.rewards.errors import RewardError

TYPES = ("exact", "contains", "numeric", "regex", "json", "length", "keyword", "command", "custom")
# Rewards that compare with the row's reference: the prompts need a reference column.
NEEDS_REFERENCE = frozenset({"exact", "contains", "numeric"})
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def _meta(label: str, help: str, choices: tuple[str, ...] | None = None) -> dict[str, Any]:
    return {"label": label, "help": help, "choices": choices}


@dataclass(frozen=True)
class Reward:
    """One verifiable reward: scores a completion in [0, 1] (custom: any finite number)."""

    type: str = field(metadata=_meta("Type", "What the reward checks.", TYPES))
    weight: float = field(
        default=1,
        metadata=_meta("Weight", "Multiplies this reward in the total the model maximises."),
    )
    name: str | None = field(
        default=None,
        metadata=_meta(
            "Name",
            "Column name in progress (reward_<name>); default: the type, numbered if repeated.",
        ),
    )
    pattern: str | None = field(
        default=None,
        metadata=_meta(
            "Pattern", "regex: a Python regular expression searched for in the completion."
        ),
    )
    case_sensitive: bool = field(
        default=False,
        metadata=_meta("Case sensitive", "regex and keyword: match upper and lower case exactly."),
    )
    keys: tuple[str, ...] | None = field(
        default=None,
        metadata=_meta(
            "Keys", "json: top-level keys the object must have; partial credit per key present."
        ),
    )
    min_chars: int | None = field(
        default=None,
        metadata=_meta("Min characters", "length: shorter completions score length / min_chars."),
    )
    max_chars: int | None = field(
        default=None,
        metadata=_meta(
            "Max characters", "length: longer completions lose credit linearly, 0 at twice this."
        ),
    )
    words: tuple[str, ...] | None = field(
        default=None, metadata=_meta("Words", "keyword: whole words to look for.")
    )
    mode: str = field(
        default="any",
        metadata=_meta("Mode", "keyword: any word is enough, or all are needed.", ("any", "all")),
    )
    command: tuple[str, ...] | None = field(
        default=None,
        metadata=_meta(
            "Command",
            "command: program and arguments, run without a shell, e.g. pytest -q "
            "{completion_file}.",
        ),
    )
    input: str = field(
        default="stdin",
        metadata=_meta(
            "Input",
            "command: pipe the completion to stdin, or write it to a file whose path "
            "replaces each {completion_file} argument.",
            ("stdin", "file"),
        ),
    )
    score_from: str = field(
        default="exit_code",
        metadata=_meta(
            "Score from",
            "command: exit code 0 scores 1, or the last number printed on stdout.",
            ("exit_code", "stdout"),
        ),
    )
    min_score: float = field(
        default=0, metadata=_meta("Min score", "command, stdout: the printed value that scores 0.")
    )
    max_score: float = field(
        default=1, metadata=_meta("Max score", "command, stdout: the printed value that scores 1.")
    )
    timeout: float = field(
        default=30,
        metadata=_meta(
            "Timeout (s)",
            "command: seconds before the program and its children are killed (scores 0).",
        ),
    )
    file: str | None = field(
        default=None,
        metadata=_meta(
            "File", "custom: Python file defining reward(prompt, completion, reference, row)."
        ),
    )
    fn: str = field(
        default="reward", metadata=_meta("Function", "custom: name of the function in the file.")
    )

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise RewardError(f"Reward.type {self.type!r} is not one of {', '.join(TYPES)}.")
        checks.check_number(self, "weight")
        if self.name is not None and not (isinstance(self.name, str) and _NAME.match(self.name)):
            raise RewardError(f"Reward.name {self.name!r} must be letters, digits, _ or -.")
        for name in ("keys", "words"):
            value = getattr(self, name)
            if isinstance(value, str | list):
                object.__setattr__(self, name, (value,) if isinstance(value, str) else tuple(value))
        if self.command is not None:
            object.__setattr__(self, "command", command_reward.parse_command(self.command))
        checks.validate(self)

    @property
    def label(self) -> str:
        """The name shown in progress columns (before numbering duplicates)."""
        return self.name or self.type

    @property
    def needs_reference(self) -> bool:
        """True when scoring compares with the row's reference answer."""
        return self.type in NEEDS_REFERENCE

    def copy_into(self, run_dir: str | Path) -> Reward:
        """For custom rewards: copy the file into <run_dir>/rewards/<name>.py and return a
        Reward that points at the copy, so the run stays self-contained. Others: unchanged.

        Call it on named rewards (`assign_names`), so two custom rewards get two files."""
        if self.type != "custom":
            return self
        copy = custom_reward.copy_file(str(self.file), run_dir, self.label)
        return dataclasses.replace(self, file=str(copy))

    def to_dict(self, run_dir: str | Path | None = None) -> dict[str, Any]:
        """JSON-ready dict for config.json. A file inside `run_dir` is stored relative to it, so
        the run directory can move (bundle, cloud notebook) and still find its reward code."""
        out = {
            k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()
        }
        if self.file and run_dir is not None:
            root, path = Path(run_dir).resolve(), Path(self.file)
            if path.is_relative_to(root):
                out["file"] = path.relative_to(root).as_posix()
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any], run_dir: str | Path | None = None) -> Reward:
        """Rebuild from `to_dict` output; a relative file is read against `run_dir`."""
        values = dict(values)
        if values.get("file") and run_dir is not None and not Path(values["file"]).is_absolute():
            values["file"] = str(Path(run_dir) / values["file"])
        unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise RewardError(
                f"Reward settings have unknown fields {sorted(unknown)}; this "
                "config.json was written by another version of dragonfarm."
            )
        return cls(**values)


def reward(
    type: str,
    weight: float = 1,
    name: str | None = None,
    pattern: str | None = None,
    case_sensitive: bool = False,
    keys: Any = None,
    min_chars: int | None = None,
    max_chars: int | None = None,
    words: Any = None,
    mode: str = "any",
    command: Any = None,
    input: str = "stdin",
    score_from: str = "exit_code",
    min_score: float = 0,
    max_score: float = 1,
    timeout: float = 30,
    file: str | None = None,
    fn: str = "reward",
) -> Reward:
    """A verifiable reward for `dragon.reinforce`, as in the manual's `dragon_reward`.

    >>> reward("regex", pattern=r"^T-\\d{4}", weight=2).label
    'regex'
    >>> reward("length", max_chars=400, weight=0.5).max_chars
    400
    >>> reward("json", keys=["id", "status"]).keys
    ('id', 'status')
    """
    return Reward(
        type=type,
        weight=weight,
        name=name,
        pattern=pattern,
        case_sensitive=case_sensitive,
        keys=keys,
        min_chars=min_chars,
        max_chars=max_chars,
        words=words,
        mode=mode,
        command=command,
        input=input,
        score_from=score_from,
        min_score=min_score,
        max_score=max_score,
        timeout=timeout,
        file=file,
        fn=fn,
    )


def reward_names(rewards: list[Reward]) -> list[str]:
    """Unique names in order: a given name, else the type, then type_2, type_3 for repeats.

    >>> reward_names([reward("regex", pattern="a"), reward("exact"), reward("regex", pattern="b")])
    ['regex', 'exact', 'regex_2']
    """
    given = [r.name for r in rewards if r.name]
    if len(set(given)) < len(given):
        raise RewardError("Two rewards have the same name; give each reward a different name.")
    taken, names = set(given), []
    for r in rewards:
        name, n = r.name or r.type, 1
        while r.name is None and name in taken:
            n += 1
            name = f"{r.type}_{n}"
        taken.add(name)
        names.append(name)
    return names


def assign_names(rewards: list[Reward]) -> list[Reward]:
    """The rewards with `name` filled in from `reward_names`, as config.json should store them."""
    return [
        r if r.name == name else dataclasses.replace(r, name=name)
        for r, name in zip(rewards, reward_names(rewards), strict=True)
    ]
