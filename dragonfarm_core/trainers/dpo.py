"""LoRA Direct Preference Optimization: what a run with method "dpo" executes.

    python -m dragonfarm_core.trainers.dpo RUN_DIR

(That skips the queue; the launcher runs `python -m dragonfarm_core.trainers RUN_DIR`.)
DPO (Rafailov et al., 2023) raises the model's implicit reward of the chosen reply above the
rejected one, where a reply's reward is beta x (log p_policy - log p_reference) of its tokens.
The reference is the same model with the LoRA adapter switched off, so it costs no second copy
in memory; continuing from a finished run folds that run's adapters into the base first, so the
reference is that run.

`train_preference` is the whole training run for a pair-scoring function; ORPO (orpo.py) runs it
with its own score. It reads top to bottom: config, pairs, model, step plan, resume, the loop,
final eval, samples, adapter. `TrainArgs.batch_size` counts pairs (two rows each).
"""

from __future__ import annotations

import functools
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from dragonfarm_core.rundir import files
from dragonfarm_core.trainers import lifecycle, modeling, pref_data
from dragonfarm_core.trainers.batching import StepPlan, grouped_batches
from dragonfarm_core.trainers.common import (
    RunReporter,
    Stopwatch,
    TrainState,
    reported_run,
    resolve_placement,
)
from dragonfarm_core.trainers.config import TrainConfig, load_config
from dragonfarm_core.trainers.optim import Optimization
from dragonfarm_core.trainers.pref_data import EncodedPairs, PairScores, Score


def dpo_loss(policy: torch.Tensor, reference: torch.Tensor, n: int, beta: float) -> PairScores:
    """DPO from summed reply log-probabilities; rows 0..n-1 are chosen, n..2n-1 rejected."""
    chosen = beta * (policy[:n] - reference[:n])
    rejected = beta * (policy[n:] - reference[n:])
    return PairScores(loss=-F.logsigmoid(chosen - rejected), chosen=chosen, rejected=rejected)


def dpo_score(model: Any, batch: dict[str, torch.Tensor], n: int, beta: float) -> PairScores:
    policy, _ = pref_data.reply_logps(model, batch)
    with torch.no_grad(), model.disable_adapter():
        reference, _ = pref_data.reply_logps(model, batch)
    return dpo_loss(policy, reference, n, beta)


def train_step(
    model: Any, data: EncodedPairs, batches: list[list[int]], pad_id: int, opt: Optimization,
    score: Score,
) -> dict[str, float]:  # fmt: skip
    """One optimizer step over `batches` of pair indices; the loss is the mean over its pairs."""
    device = next(model.parameters()).device
    n_pairs = sum(len(pairs) for pairs in batches)
    out = dict.fromkeys(("loss", "correct", "margin", "tokens", "slots"), 0.0)
    for pairs in batches:
        batch = {k: v.to(device) for k, v in data.batch(pairs, pad_id).items()}
        scores = score(model, batch, len(pairs))
        opt.backward(scores.loss.sum() / n_pairs)
        out["loss"] += float(scores.loss.detach().sum()) / n_pairs
        out["correct"] += float(scores.correct().sum())
        out["margin"] += float(scores.margin.detach().sum())
        out["tokens"] += int(batch["attention_mask"].sum())
        out["slots"] += batch["attention_mask"].numel()
    return {**out, "pairs": n_pairs, "grad_norm": opt.step()}


def train_loop(
    run_dir: Path, report: RunReporter, config: TrainConfig, model: Any, train: EncodedPairs,
    held_out: EncodedPairs, pad_id: int, plan: StepPlan, opt: Optimization, state: TrainState,
    score: Score,
) -> bool:  # fmt: skip
    """Run the optimizer steps left in `plan`; returns True when stopped by a cancel."""
    args = config.args

    @functools.lru_cache(maxsize=1)
    def epoch_batches(epoch: int) -> list[list[int]]:
        return grouped_batches(train.lengths, args.batch_size, args.seed, epoch)

    eval_every = config.extra.eval_steps or max(1, math.ceil(plan.total_steps / 4))
    clock = Stopwatch(state.elapsed_s, state.step)
    window = {"correct": 0.0, "margin": 0.0, "pairs": 0.0}  # since the last progress row
    while state.step < plan.total_steps:
        state.step += 1
        step, (epoch, part), lr = state.step, plan.locate(state.step), opt.lr
        out = train_step(model, train, epoch_batches(epoch)[part], pad_id, opt, score)
        state.record(out["loss"], int(out["tokens"]), int(out["slots"]))
        state.elapsed_s = clock.elapsed()
        window = {k: v + out[k] for k, v in window.items()}
        if step % args.logging_steps == 0 or step in (1, plan.total_steps):
            pref_data.log_progress(
                report, step=step, epoch=plan.epoch_at(step), loss=state.take_log_loss(), lr=lr,
                grad_norm=out["grad_norm"], elapsed_s=round(state.elapsed_s, 2),
                eta_s=clock.eta(step, plan.total_steps),
                pref_acc=window["correct"] / window["pairs"],
                reward_margin=window["margin"] / window["pairs"],
            )  # fmt: skip
            window = dict.fromkeys(window, 0.0)
        if step % eval_every == 0 and step < plan.total_steps and len(held_out):
            results = pref_data.evaluate_pairs(model, held_out, args.batch_size, pad_id, score)
            pref_data.log_progress(report, step=step, epoch=plan.epoch_at(step),
                                   elapsed_s=round(clock.elapsed(), 2),
                                   **pref_data.eval_columns(results))  # fmt: skip
        if lifecycle.end_step(run_dir, report, config, model, opt, state, plan):
            return True
    return False


def train_preference(run_dir: str | os.PathLike[str], score_fn: Callable[..., PairScores]) -> str:
    """Train the pairs run in `run_dir` with `score_fn(model, batch, n, beta) -> PairScores`.

    Returns "succeeded" or "cancelled"; on any error status.json says failed (with reason,
    error and log tail) and the exception propagates. A complete checkpoint is resumed from.
    """
    run_dir = Path(run_dir)
    with reported_run(run_dir) as report:
        config = load_config(run_dir)
        args = config.args
        beta = pref_data.read_beta(config)
        score = functools.partial(score_fn, beta=beta)
        placement = resolve_placement(config.hardware)

        tokenizer = modeling.load_tokenizer(config.model)
        train_pairs = pref_data.read_pairs(run_dir, "train")
        eval_pairs = pref_data.read_pairs(run_dir, "eval")
        train = pref_data.encode_pairs(tokenizer, train_pairs, args.max_seq_len)
        held_out = pref_data.encode_pairs(tokenizer, eval_pairs, args.max_seq_len)
        pad_id = tokenizer.pad_token_id

        truncated = train.truncated_rows + held_out.truncated_rows
        training = lifecycle.start(run_dir, report, config, placement, len(train), truncated)
        model, plan, opt, state = training.model, training.plan, training.opt, training.state
        print(
            f"{config.method.upper()} (beta {beta:g}) on {config.model.name}, {placement.device} "
            f"({placement.dtype_name}): {len(train)} pairs, {plan.total_steps} steps, "
            f"{training.trainable:,} of {training.total:,} parameters trainable.",
            flush=True,
        )

        cancelled = train_loop(
            run_dir, report, config, model, train, held_out, pad_id, plan, opt, state, score
        )
        metrics = lifecycle.stop(run_dir, report, training.model, training.state, cancelled)
        if metrics is None:
            return "cancelled"

        results = pref_data.evaluate_pairs(model, held_out, args.batch_size, pad_id, score)
        files.write_eval(run_dir, {**results, "method": config.method, "beta": beta,
                                   "step": state.step})  # fmt: skip
        if len(held_out):
            pref_data.log_progress(report, step=state.step, epoch=plan.epoch_at(state.step),
                                   elapsed_s=round(state.elapsed_s, 2),
                                   **pref_data.eval_columns(results))  # fmt: skip
        pref_data.write_pair_samples(
            run_dir, model, tokenizer, eval_pairs or train_pairs,
            "eval" if eval_pairs else "train", config.n_samples, config.extra.sample_max_new_tokens,
            args.max_seq_len,
        )  # fmt: skip
        metrics.update(results)
        report.finish("succeeded", metrics=metrics)
        print(f"Done: train loss {metrics['train_loss']:.4f}, held-out preference accuracy "
              f"{results['pref_accuracy']}.", flush=True)  # fmt: skip
        return "succeeded"


def main(run_dir: str | os.PathLike[str]) -> str:
    """Train the DPO run in `run_dir`; returns "succeeded" or "cancelled"."""
    return train_preference(run_dir, dpo_score)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m dragonfarm_core.trainers.dpo RUN_DIR")
    main(sys.argv[1])
