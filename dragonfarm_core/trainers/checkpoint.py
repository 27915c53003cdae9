"""Resumable checkpoints and the final adapter, both made visible only when complete.

A checkpoint is written under a temp name in checkpoints/, flushed to disk, given its COMPLETE
marker last (files.mark_checkpoint_complete), then renamed to checkpoint-<step>: a trainer
killed mid-save leaves only a temp folder, which the next start removes. Pruning removes the
marker first (files.remove_checkpoint), so a kill mid-prune leaves a folder that is no longer
a checkpoint, never one that looks complete with a file missing; the next start removes it. It holds the adapter (peft format), the optimizer, scheduler and grad scaler states,
the RNG states (python, numpy, torch) and trainer_state.json (the loop's TrainState: step,
elapsed time, loss and token counters; and the settings it was trained with). The last two are kept. The data position needs no field:
the batches of a step follow from (seed, step) alone, see batching.StepPlan.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dragonfarm_core.rundir import files
from dragonfarm_core.settings import SettingsError
from dragonfarm_core.trainers.common import TrainState
from dragonfarm_core.trainers.optim import Optimization

KEEP = 2
ADAPTER = "adapter"
STATE = "trainer_state.json"
OPTIMIZER = "optimizer.pt"
RNG = "rng.pt"
# The settings that must match for a checkpoint to continue the same run.
SAME_RUN_KEYS = ("model", "lora", "args")


def fsync_tree(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())


def rng_states() -> dict[str, Any]:
    states = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def save_checkpoint(
    run_dir: str | os.PathLike[str],
    model: Any,
    opt: Optimization,
    state: TrainState,
    config: dict[str, Any],
) -> Path:
    """Write checkpoint-<state.step> atomically and prune to the last two; returns its path."""
    final = files.checkpoint_dir(run_dir, state.step)
    if files.checkpoint_complete(final):  # already saved at this step (a cancel after a save)
        return final
    shutil.rmtree(final, ignore_errors=True)  # half pruned, or from before the marker
    tmp = files.checkpoint_temp_dir(run_dir, state.step)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp / ADAPTER)
    torch.save(opt.state_dicts(), tmp / OPTIMIZER)
    torch.save(rng_states(), tmp / RNG)
    write_state(tmp / STATE, state, config)
    fsync_tree(tmp)
    files.mark_checkpoint_complete(tmp)
    os.replace(tmp, final)
    prune(run_dir)
    return final


def write_state(path: Path, state: TrainState, config: dict[str, Any]) -> None:
    """The loop's counters and the settings that must match for a resume, as one JSON file."""
    settings = {k: config.get(k) for k in SAME_RUN_KEYS}
    files.write_json(path, {"state": dataclasses.asdict(state), "settings": settings})


def read_state(path: Path, config: dict[str, Any]) -> TrainState:
    """The counters `write_state` wrote; SettingsError when the checkpoint holding `path` was
    trained with other settings than `config`."""
    saved = files.read_json(path)
    changed = [k for k in SAME_RUN_KEYS if saved["settings"].get(k) != config.get(k)]
    if changed:
        raise SettingsError(
            f"{path.parent} was trained with different {', '.join(changed)} settings "
            "than config.json; resume needs the same configuration. Start a new "
            "run, or delete the checkpoints to restart this one."
        )
    return TrainState(**saved["state"])


def prune(run_dir: str | os.PathLike[str]) -> None:
    """Keep the last KEEP complete checkpoints (each removed marker first)."""
    for old in files.checkpoints(run_dir)[:-KEEP]:
        files.remove_checkpoint(old)


def trim_progress(run_dir: str | os.PathLike[str], latest: Path, step: int) -> None:
    """Drop the progress rows logged after the checkpoint resumed from, so the loss curve goes
    on without a gap or a repeat."""
    kept = [r for r in files.read_progress(run_dir) if r.get("step", 0) <= step]
    files.write_progress(run_dir, kept)
    print(f"Resuming from {latest.name} (step {step}).", flush=True)


def latest_checkpoint(run_dir: str | os.PathLike[str]) -> Path | None:
    """The newest complete checkpoint, after removing what a killed save or prune left behind:
    temp folders, and checkpoint folders without their COMPLETE marker."""
    for tmp in files.checkpoint_temp_dirs(run_dir):
        shutil.rmtree(tmp, ignore_errors=True)
    for partial in files.incomplete_checkpoints(run_dir):
        print(
            f"Removing {partial.name}: it has no {files.CHECKPOINT_COMPLETE} marker (a save or "
            "a prune was cut short, or it was written before markers), so it cannot be "
            "trusted to resume from.",
            flush=True,
        )
        shutil.rmtree(partial, ignore_errors=True)
    found = files.checkpoints(run_dir)
    return found[-1] if found else None


def load_checkpoint(
    path: Path, model: Any, opt: Optimization, config: dict[str, Any]
) -> TrainState:
    """Restore everything saved at `path` into the live objects; returns the loop's state."""
    from peft import set_peft_model_state_dict
    from peft.utils import load_peft_weights

    state = read_state(path / STATE, config)
    device = next(model.parameters()).device
    set_peft_model_state_dict(model, load_peft_weights(str(path / ADAPTER), device=str(device)))
    opt.load_state_dicts(torch.load(path / OPTIMIZER, map_location=device))
    # Our own file: numpy's RNG state is not a plain tensor, so weights_only cannot read it.
    set_rng_states(torch.load(path / RNG, weights_only=False))
    return state


def resume(
    run_dir: str | os.PathLike[str], model: Any, opt: Optimization, config: dict[str, Any]
) -> TrainState | None:
    """Continue from the newest checkpoint, if any, and drop the progress rows logged after it,
    so the loss curve goes on without a gap or a repeat."""
    latest = latest_checkpoint(run_dir)
    if latest is None:
        return None
    state = load_checkpoint(latest, model, opt, config)
    trim_progress(run_dir, latest, state.step)
    return state


def save_adapter(run_dir: str | os.PathLike[str], model: Any) -> Path:
    """Write adapter/ (peft format, safetensors); a reader never sees a half-written folder."""
    final = files.adapter_dir(run_dir)
    tmp = final.with_name(f".tmp-{final.name}")
    old = final.with_name(f".old-{final.name}")
    for stale in (tmp, old):
        shutil.rmtree(stale, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    fsync_tree(tmp)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    return final
