"""Why a run failed, in words, and the changes that would make the next one work.

    t = dragon.triage(run)        # Triage(kind, explanation, fixes) for a failed run, else None
    t.fixes                       # (Fix(label, changes, action), ...)
    new = dragon.retry(run, t.fixes[0])   # a new run from the same config with the change

The kind comes from the failure reason the trainer wrote (status.json's `reason`) and, for
what the trainer cannot tell apart, from the error text:

    out_of_memory        the device ran out of memory: a smaller batch with more accumulation,
                         gradient checkpointing, 4-bit (a GPU), shorter sequences
    nan_loss             the loss became NaN or infinite (the trainer stops there): a tenth of
                         the learning rate; float32 weights when they were 16-bit
    template_error       the tokenizer has no chat template, or it failed on the rows
    data_error           the training files could not be read as rows (say which row)
    missing_dependency   a package the run needs is not installed (pip install it)
    disk_full            the disk filled up: free space, then resume from the last checkpoint
    interrupted / error  anything else: resume from the last checkpoint when there is one

A fix is applied by `retry`: the run's config read back as a RunSpec (its dataset rebuilt from
the saved file), the fix's changes set, and a new run started next to the old one; a fix whose
action is "resume" resumes the same run instead. The Monitor offers the fixes as buttons.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from typing import Any

from dragonfarm_core.data.from_spec import dataset_from_spec
from dragonfarm_core.rundir import files
from dragonfarm_core.rundir.disk import DISK_FULL
from dragonfarm_core.rundir.run import Run, open_run

MIN_SEQ_LEN = 128
# Failures that a resume from the last checkpoint can get past, once their cause is gone.
RESUMABLE = ("missing_dependency", "interrupted", DISK_FULL, "error")


@dataclass(frozen=True)
class Fix:
    label: str  # what the button says: "Batch size 2, gradient accumulation 8"
    changes: dict[str, dict[str, Any]] = field(default_factory=dict)  # group -> field -> value
    action: str = "new"  # "new": a new run with the changes; "resume": resume this run


@dataclass(frozen=True)
class Triage:
    kind: str
    explanation: str
    fixes: tuple[Fix, ...] = ()


def _kind(status: dict[str, Any]) -> str:
    reason, error = status.get("reason") or "error", str(status.get("error") or "")
    if re.search(r"chat[_ ]template|apply_chat_template", error, re.I):
        return "template_error"
    if reason == "error" and re.search(r"No module named|ModuleNotFoundError", error):
        return "missing_dependency"
    if reason == "error" and re.search(r"out of memory|can't allocate memory", error, re.I):
        return "out_of_memory"
    if reason == "error" and re.search(r"No space left on device", error, re.I):
        return DISK_FULL
    return reason


def _memory_fixes(config: dict[str, Any]) -> list[Fix]:
    args, hardware = config.get("args") or {}, config.get("hardware") or {}
    batch, accum = int(args.get("batch_size", 1)), int(args.get("grad_accum", 1))
    fixes = []
    if batch > 1:
        smaller = max(1, batch // 2)
        more = accum * batch // smaller
        fixes.append(Fix(f"Batch size {smaller}, gradient accumulation {more}",
                         {"args": {"batch_size": smaller, "grad_accum": more}}))  # fmt: skip
    if not args.get("gradient_checkpointing"):
        fixes.append(Fix("Gradient checkpointing on", {"args": {"gradient_checkpointing": True}}))
    seq = int(args.get("max_seq_len", 1024))
    if seq // 2 >= MIN_SEQ_LEN:
        fixes.append(Fix(f"Max sequence length {seq // 2}", {"args": {"max_seq_len": seq // 2}}))
    if str(hardware.get("device", "auto")).startswith(("cuda", "auto")) and not hardware.get(
        "load_in_4bit"
    ):
        fixes.append(Fix("Load in 4-bit (NVIDIA GPU)", {"hardware": {"load_in_4bit": True}}))
    return fixes


def _nan_fixes(config: dict[str, Any], status: dict[str, Any]) -> list[Fix]:
    lr = float((config.get("args") or {}).get("learning_rate", 2e-4))
    fixes = [Fix(f"Learning rate {lr / 10:.3g}", {"args": {"learning_rate": lr / 10}})]
    if status.get("dtype") in ("bfloat16", "float16"):
        fixes.append(Fix("float32 weights", {"hardware": {"dtype": "float32"}}))
    return fixes


EXPLANATIONS = {
    "out_of_memory": "The device ran out of memory. Each change below lowers the peak; the "
    "first keeps the same rows per optimizer step.",
    "nan_loss": "The training loss became NaN or infinite, so the run stopped rather than train "
    "on: the steps were too large (or 16-bit weights overflowed).",
    "template_error": "The model's tokenizer has no chat template, or it failed on these rows. "
    "Pick an instruct/chat model (its folder has chat_template.jinja or a chat_template in "
    "tokenizer_config.json), or one of dragon.presets().",
    "data_error": "The training rows could not be read: the error names the file and row. "
    "Fix the dataset (Data and Mapping tabs) and train again.",
    "missing_dependency": "A package this run needs is not installed: install what the error "
    "names (pip install ...), then resume.",
    DISK_FULL: "The disk holding the run filled up, so the trainer could not write. Free "
    "space there (old runs, checkpoints, the model cache), then resume.",
    "config_error": "A setting does not fit this model or machine: the error says which.",
    "model_error": "The model, its tokenizer or an adapter could not be loaded: the error says "
    "which file.",
}


def triage(run: Run | str | os.PathLike[str]) -> Triage | None:
    """Why `run` failed and the changes that would help; None unless it failed."""
    run = open_run(run)
    status = run.status()
    if status.get("state") != "failed":
        return None
    config = run.config
    kind = _kind(status)
    fixes: list[Fix] = []
    if kind == "out_of_memory":
        fixes = _memory_fixes(config)
    elif kind == "nan_loss":
        fixes = _nan_fixes(config, status)
    if kind in RESUMABLE and files.checkpoints(run.dir):
        fixes.append(Fix("Resume from the last checkpoint", action="resume"))
    explanation = EXPLANATIONS.get(kind, "The run failed; its error and log say why.")
    return Triage(kind, explanation, tuple(fixes))


def retry(run: Run | str | os.PathLike[str], fix: Fix, wait: bool = False) -> Run:
    """Apply `fix`: a new run from `run`'s config with the fix's changes (next to it), or, for
    a resume fix, `run` resumed."""
    from dragonfarm_core.spec import RunSpec
    from dragonfarm_core.training import train as training

    run = open_run(run)
    if fix.action == "resume":
        return training.resume(run, wait=wait)
    spec = RunSpec.from_dict(run.config, run.dir)
    changed: dict[str, Any] = {"dataset": dataset_from_spec(spec.dataset)}
    for group, values in fix.changes.items():
        if group not in ("args", "lora", "hardware"):
            raise ValueError(f"A fix changes args, lora or hardware, not {group!r}.")
        changed[group] = dataclasses.replace(getattr(spec, group), **values)
    return training.start(dataclasses.replace(spec, **changed), runs_dir=run.dir.parent, wait=wait)
