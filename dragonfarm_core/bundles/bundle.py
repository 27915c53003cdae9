"""`bundle()`: write a run to train on a cloud GPU, without training it here.

    run = dragon.bundle(ds, "Qwen/Qwen2.5-0.5B-Instruct")   # state "bundled"
    run.dir / "bundle" / f"dragonfarm-{run.id}.zip"         # upload it with the notebook
    dragon.remote(run, "colab")                               # the steps; import_results() after

The run directory is written by the code train(), prefer() and reinforce() use (a `RunSpec`,
then `rundir.create.write_run`): the same config.json and data files, so the run is exactly
what it would be locally. Instead of launching the trainer, its state becomes "bundled" and
`bundle_zip` writes the zip. `pack_run` does the same for a run that already exists (the
command line's `dragonfarm pack RUN_DIR`, and remote() for a run that failed here).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from dragonfarm_core.bundles.archive import write_bundle
from dragonfarm_core.method_args import GrpoArgs, PreferenceArgs, check_rewards, preference_args
from dragonfarm_core.methods import METHODS
from dragonfarm_core.rundir import create, files
from dragonfarm_core.rundir.run import Run, open_run
from dragonfarm_core.settings import Lora, TrainArgs
from dragonfarm_core.spec import RunSpec


def _method(method: str | None, dataset: Any, rewards: Any) -> str:
    """The method a bundle trains: as given, else GRPO with rewards, DPO for pairs, SFT."""
    if method is not None:
        if method not in METHODS:
            raise ValueError(f"method={method!r} is not one of {', '.join(map(repr, METHODS))}.")
        return method
    if rewards is not None:
        return "grpo"
    kind = getattr(getattr(dataset, "mapping", None), "kind", None)
    return "dpo" if kind in METHODS["dpo"].mapping_kinds else "sft"


def _method_args(method: str, beta: float | None, rewards: Any, group_size: int,
                 temperature: float, max_new_tokens: int, loss_type: str | None = None,
                 scale_rewards: str = "group", label_smoothing: float = 0.0) -> Any:  # fmt: skip
    """The method's settings group, as prefer() and reinforce() build it."""
    if method == "grpo":
        if rewards is None:
            raise ValueError("method='grpo' needs rewards=[dragon.reward(...)], as reinforce().")
        extra = {} if beta is None else {"beta": beta}
        return GrpoArgs(rewards=check_rewards(rewards), group_size=group_size,
                        temperature=temperature, max_new_tokens=max_new_tokens,
                        loss_type=loss_type or "dapo", scale_rewards=scale_rewards,
                        **extra)  # fmt: skip
    if rewards is not None:
        raise ValueError(f"rewards= are for GRPO; method {method!r} takes none.")
    if METHODS[method].settings is not None:
        return preference_args(method, PreferenceArgs().beta if beta is None else beta,
                               loss_type or "sigmoid", label_smoothing)  # fmt: skip
    if beta is not None:
        raise ValueError(f"beta= is for DPO, ORPO and GRPO; method {method!r} takes none.")
    return None


def bundle(
    dataset: Any,
    model: Any,
    lora: Lora | None = None,
    args: TrainArgs | None = None,
    name: str | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
    n_samples: int = 10,
    revision: str | None = None,
    trust_remote_code: bool = False,
    method: str | None = None,
    beta: float | None = None,
    rewards: Any = None,
    group_size: int = 4,
    temperature: float = 1,
    max_new_tokens: int = 128,
    loss_type: str | None = None,
    scale_rewards: str = "group",
    label_smoothing: float = 0.0,
) -> Run:
    """Write a run as train()/prefer()/reinforce() would, and zip it for a GPU machine.

    method: "sft", "dpo", "orpo" or "grpo"; None picks GRPO when `rewards` are given, DPO for a
    dataset mapped with .map_pairs(), SFT otherwise. args=None takes the method's defaults (as
    its own function does); beta=None and loss_type=None the method's defaults (loss_type and
    label_smoothing as prefer() takes them for DPO, loss_type as reinforce() for GRPO). Nothing
    is trained here: the run's state is "bundled" and <run>/bundle/dragonfarm-<run id>.zip
    holds the data, config.json, the trainer's code, pinned requirements for a CUDA machine and
    the notebook (also written next to it). A `command` reward whose program would not exist remotely is warned about.
    Continue with dragon.remote(run, provider), then dragon.import_results(run, zip).
    """
    chosen = _method(method, dataset, rewards)
    settings = _method_args(chosen, beta, rewards, group_size, temperature, max_new_tokens,
                            loss_type, scale_rewards, label_smoothing)  # fmt: skip
    spec = RunSpec(chosen, dataset, model, lora=lora, args=args, method_args=settings,
                   name=name, n_samples=n_samples, revision=revision,
                   trust_remote_code=trust_remote_code)  # fmt: skip
    path = create.write_run(spec, run_dir, runs_dir)
    return pack_run(path)


def pack_run(run: Run | str | os.PathLike[str]) -> Run:
    """Bundle a run that exists (one written here and never started, or one that failed or was
    cancelled here, e.g. for lack of memory) as it is: write its zip, mark it "bundled"."""
    run = open_run(run)
    state = run.status().get("state")
    if state == "succeeded":
        raise ValueError(f"Run {run.id} already succeeded; there is nothing to train elsewhere. "
                         "To train further, start a new run from it.")  # fmt: skip
    if state in files.ACTIVE_STATES and files.read_status(run.dir).get("pid") is not None:
        raise RuntimeError(f"Run {run.id} is {state} here; cancel it first to bundle it.")
    if state == files.DAMAGED:
        raise RuntimeError(f"Run {run.id} cannot be bundled as it is: {run.status()['error']}")
    RunSpec.from_dict(run.config, run_dir=run.dir)  # a config the trainer would refuse
    manifest = write_bundle(run.dir)
    files.write_status(run.dir, {"state": "bundled", "bundled_at": manifest["created_at"]})
    for warning in manifest["warnings"]:
        warnings.warn(warning, stacklevel=2)
    return run
