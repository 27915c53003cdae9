"""LoRA supervised fine-tuning: what a run with method "sft" executes.

    python -m dragonfarm_core.trainers.sft RUN_DIR

That command skips the queue (tests, debugging); the launcher runs
`python -m dragonfarm_core.trainers RUN_DIR`, which waits its turn and then calls `main`.
Reads top to bottom: config, data, model, step plan, resume, the loop, adapter, final eval
and samples. Everything it writes goes into the run directory (docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import functools
import math
import os
import sys
from pathlib import Path
from typing import Any

from dragonfarm_core.trainers import evaluation, lifecycle, modeling, sft_data
from dragonfarm_core.trainers.batching import StepPlan, collate, grouped_batches
from dragonfarm_core.trainers.common import (
    RunReporter,
    Stopwatch,
    TrainState,
    reported_run,
    resolve_placement,
)
from dragonfarm_core.trainers.config import TrainConfig, load_config
from dragonfarm_core.trainers.optim import Optimization
from dragonfarm_core.trainers.sft_data import IGNORE, Encoded, SftData


def train_step(
    model: Any, data: Encoded, batches: list[list[int]], pad_id: int, opt: Optimization
) -> tuple[float, float, int, int]:
    """One optimizer step: (mean loss per learned token, grad norm, real tokens, token slots).

    Each micro-batch's summed loss is divided by the step's total count of learned tokens,
    so accumulation gives exactly the token-level mean of one big batch.
    """
    device = next(model.parameters()).device
    parts = [collate(data, rows, pad_id) for rows in batches]
    n_labels = max(1, sum(int((b["labels"][:, 1:] != IGNORE).sum()) for b in parts))
    total = 0.0
    for batch in parts:
        loss, _ = modeling.label_loss(model, {k: v.to(device) for k, v in batch.items()})
        opt.backward(loss / n_labels)
        total += float(loss.detach())
    grad_norm = opt.step()
    masks = [b["attention_mask"] for b in parts]
    tokens, slots = sum(int(m.sum()) for m in masks), sum(m.numel() for m in masks)
    return total / n_labels, grad_norm, tokens, slots


def train_loop(
    run_dir: Path,
    report: RunReporter,
    config: TrainConfig,
    model: Any,
    data: SftData,
    plan: StepPlan,
    opt: Optimization,
    state: TrainState,
) -> bool:
    """Run the optimizer steps left in `plan`; returns True when stopped by a cancel."""
    args = config.args

    @functools.lru_cache(maxsize=1)
    def epoch_batches(epoch: int) -> list[list[int]]:
        return grouped_batches(data.train.lengths, args.batch_size, args.seed, epoch)

    eval_every = config.extra.eval_steps or max(1, math.ceil(plan.total_steps / 4))
    clock = Stopwatch(state.elapsed_s, state.step)
    if state.step == 0 and len(data.held_out):  # where the curve starts: the untrained adapter
        eval_loss, _ = evaluation.eval_loss(model, data.held_out, args.batch_size, data.pad_id)
        report.progress(step=0, epoch=0.0, eval_loss=eval_loss, elapsed_s=0.0)
    while state.step < plan.total_steps:
        state.step += 1
        step, (epoch, part), lr = state.step, plan.locate(state.step), opt.lr
        loss, grad_norm, tokens, slots = train_step(
            model, data.train, epoch_batches(epoch)[part], data.pad_id, opt
        )
        state.record(loss, tokens, slots)
        state.elapsed_s = clock.elapsed()
        if step % args.logging_steps == 0 or step in (1, plan.total_steps):
            report.progress(
                step=step,
                epoch=plan.epoch_at(step),
                loss=state.take_log_loss(),
                lr=lr,
                grad_norm=grad_norm,
                elapsed_s=round(state.elapsed_s, 2),
                eta_s=clock.eta(step, plan.total_steps),
            )
        if step % eval_every == 0 and step < plan.total_steps and len(data.held_out):
            eval_loss, _ = evaluation.eval_loss(model, data.held_out, args.batch_size, data.pad_id)
            report.progress(
                step=step,
                epoch=plan.epoch_at(step),
                eval_loss=eval_loss,
                elapsed_s=round(clock.elapsed(), 2),
            )
        if lifecycle.end_step(run_dir, report, config, model, opt, state, plan):
            return True
    return False


def main(run_dir: str | os.PathLike[str]) -> str:
    """Train the run in `run_dir`; returns "succeeded" or "cancelled".

    On any error status.json says failed (with reason, error and log tail) and the exception
    propagates. A complete checkpoint in the run directory is resumed from.
    """
    run_dir = Path(run_dir)
    with reported_run(run_dir) as report:
        config = load_config(run_dir)
        args = config.args
        placement = resolve_placement(config.hardware)
        tokenizer = modeling.load_tokenizer(config.model)
        data = sft_data.load(run_dir, tokenizer, args.max_seq_len)

        truncated = data.train.truncated_rows + data.held_out.truncated_rows
        training = lifecycle.start(run_dir, report, config, placement, len(data.train), truncated)
        model, plan, opt, state = training.model, training.plan, training.opt, training.state
        print(
            f"Training {config.model.name} on {placement.device} ({placement.dtype_name}): "
            f"{len(data.train)} rows, {plan.total_steps} steps, "
            f"{training.trainable:,} of {training.total:,} parameters trainable.",
            flush=True,
        )

        cancelled = train_loop(run_dir, report, config, model, data, plan, opt, state)
        metrics = lifecycle.stop(run_dir, report, training, cancelled)
        if metrics is None:
            return "cancelled"

        results = evaluation.write_eval_and_samples(
            run_dir,
            model,
            data,
            args.batch_size,
            config.n_samples,
            config.extra.sample_max_new_tokens,
            state.step,
            args.max_seq_len,
        )
        if len(data.held_out):
            report.progress(
                step=state.step,
                epoch=plan.epoch_at(state.step),
                eval_loss=results["eval_loss"],
                elapsed_s=round(state.elapsed_s, 2),
            )
        metrics.update({k: results[k] for k in ("eval_loss", "perplexity", "eval_tokens")})
        metrics["start_eval_loss"] = results.get("start_eval_loss")
        report.finish("succeeded", metrics=metrics)
        print(
            f"Done: train loss {metrics['train_loss']:.4f}, eval loss {results['eval_loss']}.",
            flush=True,
        )
        return "succeeded"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m dragonfarm_core.trainers.sft RUN_DIR")
    main(sys.argv[1])
