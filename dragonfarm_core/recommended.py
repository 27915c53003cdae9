"""Settings that fit a model: what `train()`, `prefer()`, `reinforce()`, the Train tab and the
command line use when the person sets nothing.

The manual's defaults (learning rate 2e-4, 3 epochs, rank 16, 1,024 tokens) are the common
LoRA settings for instruction-tuned models of 0.1-2B parameters, so the Hub presets keep them.
The bundled model is different: it has 6M parameters and a 4,096-token vocabulary, and on text
unlike its own corpus it starts confidently wrong (held-out loss above the uniform baseline,
ln 4096 = 8.3), so the manual's small steps barely move it (issue 17 measured 11.45 -> 11.03 on
60 helpdesk tickets). Its recommendations are measured by `bench/first_contact.py` (SFT) and
`bench/outcomes.py` (DPO, ORPO, GRPO) on this kind of machine; the figures are next to them.

    >>> recommended("dragonfarm/tiny-support").args.learning_rate
    0.005
    >>> recommended("Qwen/Qwen2.5-0.5B-Instruct", "dpo").args == METHODS["dpo"].default_args
    True
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from dragonfarm_core.methods import METHODS
from dragonfarm_core.models import PRESETS, is_bundled
from dragonfarm_core.rundir import files
from dragonfarm_core.settings import Lora, TrainArgs, to_dict

# Per method, the fields that differ from the method's defaults, as {"lora": {}, "args": {}}.
# SFT, on bench/data/bike_shop.csv (120 rows of a domain the project's data does not cover, 5 %
# held out, bench/first_contact.py): held-out loss 12.01 -> 6.53 after 2 epochs, then flat
# (6.41, 6.44, 6.44 at epochs 4, 6, 8) while the training loss kept falling, so the manual's 3
# epochs stay (3 epochs: 12.01 -> 6.41, 47 % lower; the manual's defaults: 12.01 -> 10.56, 12 %
# lower); the learning rate is 25x the manual's, with one batch of rows per step.
_BUNDLED_SFT = {"learning_rate": 5e-3, "grad_accum": 1, "max_seq_len": 384}
# DPO/ORPO and GRPO: bench/outcomes.py's settings (its docstrings hold the measured outcomes).
_BUNDLED_PREFER = {"learning_rate": 5e-4, "epochs": 2, "grad_accum": 1, "max_seq_len": 384}
_BUNDLED_GRPO = {"learning_rate": 2e-3}
BUNDLED: dict[str, dict[str, dict[str, Any]]] = {
    "sft": {"args": _BUNDLED_SFT},
    "dpo": {"args": _BUNDLED_PREFER},
    "orpo": {"args": _BUNDLED_PREFER},
    "grpo": {"args": _BUNDLED_GRPO},
}
PRESET_IDS = frozenset(str(p["id"]) for p in PRESETS)
MAX_CHAIN = 64  # runs continued from runs: more links than this is a loop in the configs


@dataclass(frozen=True)
class Recommendation:
    """The LoRA and training settings for a model and method, and where they come from."""

    lora: Lora
    args: TrainArgs
    source: str  # "bundled", "preset" or "manual" (a model the project has no figures for)

    @property
    def note(self) -> str:
        """What the Train tab says about these settings."""
        if self.source == "bundled":
            return ("Recommended for the bundled model: it is tiny, and the manual's small "
                    "steps barely move it.")  # fmt: skip
        if self.source == "preset":
            return "Recommended for this model: the manual's defaults (common LoRA settings)."
        return "The manual's defaults: the project has no figures for this model."


def recommended(model: Any, method: str = "sft") -> Recommendation:
    """The settings `model` (a preset or Hub id, a folder, or a run to continue from: its base
    model's) trains best with under `method`; the manual's defaults for a model without any."""
    row = METHODS.get(method)
    if row is None:
        raise ValueError(f"method={method!r} is not one of {', '.join(METHODS)}.")
    name = base_model_name(model)
    if name is not None and is_bundled(name):
        chosen = BUNDLED[method]
        lora = dataclasses.replace(Lora(), **chosen.get("lora", {}))
        return Recommendation(lora, replace_args(row.default_args, chosen["args"]), "bundled")
    source = "preset" if name in PRESET_IDS else "manual"
    return Recommendation(Lora(), row.default_args, source)


def replace_args(args: TrainArgs, changes: dict[str, Any]) -> TrainArgs:
    """`args` with `changes` (through its dict: TrainArgs keeps unknown keywords in `extra`)."""
    return TrainArgs(**{**to_dict(args), **changes})


def base_model_name(model: Any) -> str | None:
    """The model a run (or run folder) was trained from, following continued runs; the name
    itself for anything else. None when a run's config cannot be read."""
    from dragonfarm_core.rundir.run import Run  # run.py imports the launcher
    from dragonfarm_core.spec import is_run_folder  # spec.py asks this module for defaults

    current: Any = str(model.dir) if isinstance(model, Run) else model
    for _ in range(MAX_CHAIN):
        if not isinstance(current, str | os.PathLike):
            return None
        if not is_run_folder(current):
            return os.fspath(current)
        try:
            config = files.read_config(current)
            current = config["model"]["name"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
    return None


def preset_columns() -> dict[str, list[Any]]:
    """The SFT recommendation of each preset, as columns for `presets()`."""
    recs = [recommended(str(p["id"])) for p in PRESETS]
    return {
        "learning_rate": [r.args.learning_rate for r in recs],
        "epochs": [r.args.epochs for r in recs],
        "lora_r": [r.lora.r for r in recs],
        "max_seq_len": [r.args.max_seq_len for r in recs],
    }


__all__ = ["Recommendation", "recommended"]
