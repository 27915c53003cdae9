"""`prefer()`: preference optimization (DPO or ORPO) with LoRA, the stage after `train()`.

    sft = dragon.train(ds, "dragonfarm/tiny-support", wait=True)
    pairs = dragon.dataset("preferences.csv").map_pairs(prompt="q", chosen="good", rejected="bad")
    dpo = dragon.prefer(pairs, sft, method="dpo", beta=0.1, wait=True)
    dragon.evaluate(dpo)

Like train(), it writes a run directory and starts the trainer in a subprocess
(dragonfarm_core/trainers/dpo.py or orpo.py); config.json records `method` and `method_args`
(`beta`, and DPO's `loss_type` and `label_smoothing`). Passing a finished run as `model` folds
its adapters into the base before a new adapter is trained, which is the usual order: train(),
then prefer().
"""

from __future__ import annotations

import os
from typing import Any

from dragonfarm_core.method_args import DpoArgs, preference_args
from dragonfarm_core.methods import METHODS as TABLE
from dragonfarm_core.rundir.run import Run
from dragonfarm_core.settings import Hardware, Lora, TrainArgs
from dragonfarm_core.spec import DEFAULT_HARDWARE, RunSpec
from dragonfarm_core.training.train import start

METHODS = tuple(name for name, row in TABLE.items() if row.function == "prefer")


def prefer(
    dataset: Any,
    model: Any,
    method: str = "dpo",
    beta: float = DpoArgs.beta,  # the defaults are the method args' own (method_args.py)
    loss_type: str = DpoArgs.loss_type,
    label_smoothing: float = DpoArgs.label_smoothing,
    lora: Lora | None = None,
    args: TrainArgs | None = None,
    hardware: Hardware = DEFAULT_HARDWARE,
    name: str | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
    n_samples: int = RunSpec.n_samples,
    revision: str | None = None,
    trust_remote_code: bool = False,
    wait: bool = False,
) -> Run:
    """Teach `model` which of two replies is better, from a dataset mapped with .map_pairs().

    method: "dpo" (Direct Preference Optimization) pushes the model's implicit reward of the
    chosen reply above the rejected one, relative to a reference: the same model with the
    adapter switched off, so it costs no extra memory. "orpo" (Odds Ratio Preference
    Optimization) adds an odds-ratio penalty on the rejected reply to the supervised loss on the
    chosen one; it needs no reference and works from a base model that was not fine-tuned.
    beta: how hard the model is pushed (DPO's KL strength, ORPO's odds-ratio weight); 0.1 is a
    sensible start for both. `args.batch_size` counts pairs.
    loss_type (DPO only): TRL's DPO loss: "sigmoid" (DPO's own), "hinge", "ipo" or "robust";
    label_smoothing: robust's share of pairs expected the wrong way round (below 0.5).
    model: a preset or Hub id, a local folder, or a succeeded Run to continue from.

    Returns the Run at once; with wait=True, blocks with a progress bar and raises
    RunFailedError if it fails.
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r} is not one of {', '.join(map(repr, METHODS))}.")
    spec = RunSpec(
        method, dataset, model, lora=lora, args=args, hardware=hardware,
        method_args=preference_args(method, beta, loss_type, label_smoothing), name=name,
        n_samples=n_samples, revision=revision, trust_remote_code=trust_remote_code,
    )  # fmt: skip
    return start(spec, run_dir, runs_dir, wait)
