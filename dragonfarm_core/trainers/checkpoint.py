"""Resumable checkpoints and the final adapter, both made visible only when complete.

Trainer writes each checkpoint-<step> (adapter, optimizer, scheduler, RNG states, its
trainer_state.json); trl_run.RunCallback then adds the run's own state (`write_state`: the
loop's TrainState and the settings it was trained with), flushes it to disk and writes the
COMPLETE marker last (files.mark_checkpoint_complete). Pruning to the last two removes the
marker first (files.remove_checkpoint), so a kill mid-save or mid-prune leaves a folder that
is no checkpoint, never one that looks complete with a file missing; `latest_checkpoint`
removes such folders before a resume.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any

from dragonfarm_core.rundir import files
from dragonfarm_core.settings import SettingsError
from dragonfarm_core.trainers.common import TrainState

KEEP = 2
# The settings that must match for a checkpoint to continue the same run.
SAME_RUN_KEYS = ("model", "lora", "args")


def fsync_tree(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())


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
