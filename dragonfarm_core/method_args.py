"""Each method's own settings, config.json's `method_args`: `PreferenceArgs` (ORPO),
`DpoArgs` (DPO: PreferenceArgs and the loss) and `GrpoArgs` (GRPO: the rewards and
`ReinforceArgs`, the sampling settings).

    dragon.PreferenceArgs(beta=0.2)
    dragon.DpoArgs(beta=0.2, loss_type="ipo")
    dragon.GrpoArgs(rewards=[dragon.reward("numeric")], group_size=6)

Frozen dataclasses like `Lora` and `TrainArgs`: validated in `__post_init__` (every error names
the field), their field metadata gives the Train tab its widgets, and `to_dict`/`from_dict` are
config.json's method_args. The method table (`methods.METHODS`) says which method takes which.
GRPO's rewards are kept as the dicts config.json stores (`Reward.to_dict()`), so reading a run
back never runs a custom reward's file or looks for a command's program in the app process; they
are checked as `Reward`s when the run is written.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from dragonfarm_core.rewards import NEEDS_REFERENCE, TYPES, Reward, assign_names
from dragonfarm_core.settings import SettingsError, check_choice, check_numbers, setting


@dataclass(frozen=True)
class PreferenceArgs:
    """DPO's and ORPO's own setting: how hard the model is pushed towards the chosen reply."""

    beta: float = setting(0.1, "Beta", step=0.01, help=
        "How hard the model is pushed: DPO's KL strength, ORPO's odds-ratio weight; 0.1 is a "
        "sensible start for both.")  # fmt: skip

    def __post_init__(self) -> None:
        beta = self.beta
        if isinstance(beta, bool) or not isinstance(beta, int | float) or not 0 < beta < math.inf:
            raise SettingsError(
                f"PreferenceArgs.beta must be a number > 0 (0.1 is a sensible start), got {beta!r}."
            )
        object.__setattr__(self, "beta", float(beta))

    def to_dict(self, run_dir: str | Path | None = None) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any], run_dir: str | Path | None = None) -> Self:
        return cls(**_known(cls, values))

    def copy_into(self, run_dir: str | Path) -> PreferenceArgs:
        return self  # nothing outside config.json to keep


# TRL's DPO losses that need nothing more than beta (and robust's label smoothing); each is
# scored on the held-out pairs the way it trains (trainers/dpo.py's dpo_loss).
DPO_LOSSES = ("sigmoid", "hinge", "ipo", "robust")


@dataclass(frozen=True)
class DpoArgs(PreferenceArgs):
    """DPO's settings: beta, and which of TRL's DPO losses turns the reward margin into a loss."""

    loss_type: str = setting("sigmoid", "Loss", choices=DPO_LOSSES, help=
        "TRL's loss_type: sigmoid is DPO's own; hinge stops pushing once a pair is won by a "
        "margin of 1/beta; ipo (Azar et al.) pulls the per-token margin towards 1/(2 beta) and "
        "overfits less on small data; robust expects some pairs to be the wrong way round "
        "(label smoothing says how many).")  # fmt: skip
    label_smoothing: float = setting(0.0, "Label smoothing", min=0.0, max=0.49, step=0.01, help=
        "robust only: the share of pairs you expect to be labelled the wrong way round "
        "(below 0.5).")  # fmt: skip

    def __post_init__(self) -> None:
        super().__post_init__()
        check_numbers(self)
        check_choice(self, "loss_type")
        if self.label_smoothing and self.loss_type != "robust":
            raise SettingsError(
                f"DpoArgs.label_smoothing = {self.label_smoothing:g} is robust DPO's share of "
                f"pairs the wrong way round; {self.loss_type!r} does not use it: set "
                "loss_type='robust', or label_smoothing=0."
            )


def preference_args(method: str, beta: float, loss_type: str = "sigmoid",
                    label_smoothing: float = 0.0) -> PreferenceArgs:  # fmt: skip
    """DPO's DpoArgs, or ORPO's PreferenceArgs (which refuses DPO's loss settings)."""
    if method == "dpo":
        return DpoArgs(beta, loss_type, label_smoothing)
    if (loss_type, label_smoothing) != ("sigmoid", 0):
        raise ValueError(
            f"loss_type= and label_smoothing= choose DPO's loss; {method.upper()} has one loss of "
            "its own: leave them out, or use method='dpo'."
        )
    return PreferenceArgs(beta)


# TRL's GRPO losses that need nothing more than these settings (cispo, sapo, luspo and vespo
# take their own parameters and sequence-level ratios).
GRPO_LOSSES = ("dapo", "grpo", "dr_grpo", "bnpo")


@dataclass(frozen=True)
class ReinforceArgs:
    """GRPO's sampling settings (config.json's method_args besides the rewards).

    TrainArgs.batch_size counts prompts: each optimizer step samples batch_size x grad_accum
    prompts, and group_size completions of each.
    """

    group_size: int = setting(4, "Group size", min=2, max=64, step=1, help=
        "Completions sampled per prompt; each is judged against its group's average, so at "
        "least 2. More gives a steadier signal and costs more.")  # fmt: skip
    beta: float = setting(0.04, "KL penalty (beta)", min=0.0, max=10.0, step=0.01, help=
        "How strongly the model is held near the one it started from; 0 lets it drift "
        "freely.")  # fmt: skip
    temperature: float = setting(1.0, "Temperature", min=0.05, max=5.0, step=0.05, help=
        "Sampling temperature of the completions; above 0, or every completion of a group "
        "is the same.")  # fmt: skip
    max_new_tokens: int = setting(128, "Max new tokens", min=1, max=8192, step=1, help=
        "Longest completion; longer ones are cut and scored as they are.")  # fmt: skip
    loss_type: str = setting("dapo", "Loss", choices=GRPO_LOSSES, help=
        "How the token losses are averaged (TRL's loss_type): dapo over every completion token "
        "of the step; grpo per completion first (favours short right answers); dr_grpo over a "
        "constant, max new tokens per completion; bnpo over the micro-batch's tokens.")  # fmt: skip
    scale_rewards: str = setting("group", "Scale rewards", choices=("group", "batch", "none"),
        help="Divide each advantage by the standard deviation of its group's rewards (group), "
        "of the whole step's (batch), or not at all (none, as Dr. GRPO recommends: no "
        "difficulty bias).")  # fmt: skip

    def __post_init__(self) -> None:
        check_numbers(self)
        for name in ("loss_type", "scale_rewards"):
            check_choice(self, name)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(ReinforceArgs)}


def check_rewards(rewards: Any) -> list[Reward]:
    """The rewards as a named list; one Reward alone is accepted as a list of one."""
    if isinstance(rewards, Reward):
        rewards = [rewards]
    if not isinstance(rewards, list | tuple) or not rewards:
        raise ValueError(
            "rewards must be a non-empty list of dragon.reward(...), e.g. "
            '[dragon.reward("numeric"), dragon.reward("length", max_chars=300)].'
        )
    for i, r in enumerate(rewards):
        if not isinstance(r, Reward):
            raise TypeError(
                f"rewards[{i}] is a {type(r).__name__}, not a reward; build it with "
                'dragon.reward(type, ...), e.g. dragon.reward("regex", pattern=r"T-\\d{4}").'
            )
    return assign_names(list(rewards))


@dataclass(frozen=True, kw_only=True)
class GrpoArgs(ReinforceArgs):
    """GRPO's method_args: the rewards (summed by weight) and the sampling settings.

    `rewards` takes `dragon.reward(...)` objects (named as config.json stores them); read back
    from config.json it holds their stored dicts, which is also what it keeps.
    """

    rewards: Sequence[Any]  # Reward objects given; their stored dicts kept

    def __post_init__(self) -> None:
        super().__post_init__()
        rewards = self.rewards
        if (
            isinstance(rewards, list | tuple)
            and rewards
            and all(isinstance(r, dict) for r in rewards)
        ):
            for i, r in enumerate(rewards):
                if r.get("type") not in TYPES:
                    raise SettingsError(
                        f"GrpoArgs.rewards[{i}] has type {r.get('type')!r}, not one of "
                        f"{', '.join(TYPES)}."
                    )
            stored = tuple(dict(r) for r in rewards)
        else:
            stored = tuple(r.to_dict() for r in check_rewards(rewards))
        object.__setattr__(self, "rewards", stored)

    @property
    def needing_reference(self) -> list[str]:
        """Names of the rewards that compare with the row's reference answer."""
        return [r["name"] or r["type"] for r in self.rewards if r["type"] in NEEDS_REFERENCE]

    def to_dict(self, run_dir: str | Path | None = None) -> dict[str, Any]:
        return {"rewards": [dict(r) for r in self.rewards], **ReinforceArgs.to_dict(self)}

    @classmethod
    def from_dict(cls, values: dict[str, Any], run_dir: str | Path | None = None) -> GrpoArgs:
        """From config.json's method_args; a custom reward's file stored relative to the run
        becomes absolute against `run_dir` (when given), so the settings work from anywhere."""
        values = _known(cls, values)
        rewards = values.pop("rewards", None)
        if not isinstance(rewards, list | tuple) or not all(isinstance(r, dict) for r in rewards):
            raise SettingsError("config.json method_args['rewards'] must be a list of rewards.")
        if run_dir is not None:
            rewards = [_absolute_file(r, Path(run_dir)) for r in rewards]
        return cls(rewards=tuple(rewards), **values)

    def copy_into(self, run_dir: str | Path) -> GrpoArgs:
        """Check each reward (as dragon.reward would), copy custom reward files into the run,
        and return the settings as config.json stores them (those files relative to it)."""
        copies = [Reward.from_dict(r).copy_into(run_dir) for r in self.rewards]
        return dataclasses.replace(self, rewards=tuple(r.to_dict(run_dir) for r in copies))


def _absolute_file(stored: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    file = stored.get("file")
    if file and not Path(file).is_absolute():
        return {**stored, "file": str(run_dir / file)}
    return stored


def _known(cls: type, values: Any) -> dict[str, Any]:
    """`values` as keyword arguments of `cls`; an unknown key is refused, naming it."""
    if not isinstance(values, dict):
        raise SettingsError(f"config.json method_args must be a dict, got {values!r:.80}.")
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise SettingsError(
            f"config.json method_args has unknown key(s) {', '.join(map(repr, unknown))}; "
            f"{cls.__name__} takes {', '.join(known)}."
        )
    return dict(values)
