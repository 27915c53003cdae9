"""The start and the end every trainer shares (SFT, DPO/ORPO, GRPO).

    training = lifecycle.start(run_dir, report, config, placement, n_rows, truncated_rows)
    cancelled = train_loop(...)  # ends each step with lifecycle.end_step(...)
    metrics = lifecycle.stop(run_dir, report, training.model, training.state, cancelled)
    if metrics is None:        # cancelled: adapter and checkpoint saved, status written
        return "cancelled"

`start` loads the frozen base, adds a fresh LoRA adapter, plans the steps, builds the optimizer
and picks up a complete checkpoint if the run has one, then records device, dtype, parameter
counts and the step plan in status.json. Each trainer keeps its own data, loop and evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dragonfarm_core.rundir.status_schema import FINISHING
from dragonfarm_core.trainers import checkpoint, modeling
from dragonfarm_core.trainers.batching import StepPlan, plan_steps
from dragonfarm_core.trainers.common import Placement, RunReporter, TrainState, process_count
from dragonfarm_core.trainers.config import TrainConfig
from dragonfarm_core.trainers.optim import Optimization, build_optimization


@dataclass
class Training:
    model: Any
    plan: StepPlan
    opt: Optimization
    state: TrainState
    trainable: int
    total: int


def model_and_plan(
    report: RunReporter, config: TrainConfig, placement: Placement, n_rows: int,
    truncated_rows: int,
) -> tuple[Any, StepPlan, int, int]:  # fmt: skip
    """The frozen base with a fresh LoRA adapter, in training mode, and the step plan; device,
    dtype, parameter counts and the plan go into status.json. -> (model, plan, trainable, total)"""
    args, quantized = config.args, config.hardware.load_in_4bit
    model = modeling.load_model(config.model, placement, quantized)
    model = modeling.add_lora(model, config.lora, args.seed, args.gradient_checkpointing, quantized)
    model.train()
    # batch_size is per process: a run on several devices takes that many rows a pass each.
    rows_per_pass = args.batch_size * process_count()
    plan = plan_steps(n_rows, rows_per_pass, args.grad_accum, args.epochs, args.max_steps)
    trainable, total = modeling.count_params(model)
    report.update(
        device=str(placement.device),
        dtype=placement.dtype_name,
        params_trainable=trainable,
        params_total=total,
        total_steps=plan.total_steps,
        truncated_rows=truncated_rows,
    )
    return model, plan, trainable, total


def start(
    run_dir: Path,
    report: RunReporter,
    config: TrainConfig,
    placement: Placement,
    n_rows: int,
    truncated_rows: int,
) -> Training:
    """Model with a new adapter, step plan, optimizer, and the state to continue from."""
    model, plan, trainable, total = model_and_plan(
        report, config, placement, n_rows, truncated_rows
    )
    opt = build_optimization(model, config.args, config.extra, plan.total_steps, placement.dtype)
    state = checkpoint.resume(run_dir, model, opt, config.raw) or TrainState()
    report.update(step=state.step, epoch=plan.epoch_at(state.step))
    return Training(model, plan, opt, state, trainable, total)


def end_step(
    run_dir: Path,
    report: RunReporter,
    config: TrainConfig,
    model: Any,
    opt: Optimization,
    state: TrainState,
    plan: StepPlan,
) -> bool:
    """After each optimizer step: a checkpoint every save_steps and on a cancel request, the
    step in status.json. True when the run was asked to stop."""
    cancelled = report.cancel_requested()
    if state.step % config.args.save_steps == 0 or cancelled:
        checkpoint.save_checkpoint(run_dir, model, opt, state, config.raw)
    report.update(step=state.step, epoch=plan.epoch_at(state.step))
    return cancelled


def stop(
    run_dir: Path, report: RunReporter, model: Any, state: TrainState, cancelled: bool
) -> dict[str, Any] | None:
    """Save the adapter; the training metrics, or None once a cancelled run is recorded."""
    checkpoint.save_adapter(run_dir, model)
    metrics = state.metrics(state.elapsed_s)
    if not cancelled:
        # The held-out loss and the samples still take a while (generation is slow): say so,
        # rather than sit at "step N / N (100%)" until they are written.
        report.update(phase=FINISHING)
        print("Training done; measuring the held-out loss and writing samples.", flush=True)
        return metrics
    print(f"Cancelled after step {state.step}; checkpoint and adapter saved.", flush=True)
    report.finish("cancelled", metrics=metrics)
    return None
