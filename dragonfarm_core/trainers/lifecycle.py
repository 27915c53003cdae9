"""The start and the end every trainer shares (SFT, DPO, ORPO, GRPO, all on TRL).

    model, plan, trainable, total = lifecycle.model_and_plan(report, config, placement,
                                                             n_rows, truncated_rows)
    cancelled = trl_run.train(trainer, run_dir, callback)
    metrics = lifecycle.stop(run_dir, report, model, callback.state, cancelled)
    if metrics is None:        # cancelled: adapter and checkpoint saved, status written
        return "cancelled"

`model_and_plan` loads the frozen base, adds a fresh LoRA adapter and plans the steps, then
records device, dtype, parameter counts and the step plan in status.json. Each trainer keeps
its own data and evaluation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dragonfarm_core.rundir.status_schema import FINISHING
from dragonfarm_core.rundir.train_config import TrainConfig
from dragonfarm_core.trainers import checkpoint, modeling
from dragonfarm_core.trainers.batching import StepPlan, plan_steps
from dragonfarm_core.trainers.common import RunReporter, TrainState
from dragonfarm_core.trainers.placement import Placement, process_count


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
