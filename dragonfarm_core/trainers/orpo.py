"""LoRA Odds Ratio Preference Optimization: what a run with method "orpo" executes.

    python -m dragonfarm_core.trainers.orpo RUN_DIR

(That skips the queue; the launcher runs `python -m dragonfarm_core.trainers RUN_DIR`.)
ORPO (Hong et al., 2024) needs no reference model, so it works from a base model that has not
been fine-tuned: per pair, the loss is the supervised loss on the chosen reply plus beta times
an odds-ratio penalty that pushes the odds of the chosen reply above those of the rejected one,

    loss = -mean log p(chosen) - beta * log sigmoid(log odds(chosen) - log odds(rejected)),
    odds(y) = p(y) / (1 - p(y)),   p(y) = exp(mean log-probability of y's tokens).

The implicit reward of a reply is beta x its mean token log-probability (as in TRL), so
pref_acc is how often the chosen reply is the likelier one. It writes what a DPO run writes.

ORPO is still our own loop (DPO and SFT run on TRL's trainers): `main` reads top to bottom
(config, pairs, model, step plan, resume, the loop, final eval and samples); `train_loop` runs
the optimizer steps, `train_step` one of them. TRL's ORPOTrainer (trl.experimental.orpo)
tokenizes on its own and scores full logits; it is not measured here yet.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

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
from dragonfarm_core.trainers.pref_data import EncodedPairs, PairScores, Score, reply_logps

# p(y) = 1 would make log(1 - p) infinite; a reply's mean log-probability never reaches 0 in
# practice, and this keeps one that rounds to it finite.
MAX_MEAN_LOGP = -1e-6


def log1m_exp(x: torch.Tensor) -> torch.Tensor:
    """log(1 - exp(x)) for x < 0, accurate near 0 where 1 - exp(x) loses every digit."""
    return torch.log(-torch.expm1(x.clamp(max=MAX_MEAN_LOGP)))


def orpo_loss(chosen: torch.Tensor, rejected: torch.Tensor, beta: float) -> PairScores:
    """ORPO from the mean token log-probabilities of the chosen and rejected replies."""
    log_odds = (chosen - rejected) - (log1m_exp(chosen) - log1m_exp(rejected))
    loss = -chosen - beta * F.logsigmoid(log_odds)
    return PairScores(loss=loss, chosen=beta * chosen, rejected=beta * rejected)


def orpo_score(model: Any, batch: dict[str, torch.Tensor], n: int, beta: float) -> PairScores:
    """Score a batch whose rows 0..n-1 are chosen replies and n..2n-1 the rejected ones."""
    logps, counts = reply_logps(model, batch)
    mean = logps / counts.clamp(min=1)
    return orpo_loss(mean[:n], mean[n:], beta)


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


def main(run_dir: str | os.PathLike[str]) -> str:
    """Train the ORPO run in `run_dir`; returns "succeeded" or "cancelled".

    On any error status.json says failed (with reason, error and log tail) and the exception
    propagates. A complete checkpoint is resumed from.
    """
    run_dir = Path(run_dir)
    with reported_run(run_dir) as report:
        config = load_config(run_dir)
        args = config.args
        beta = pref_data.read_beta(config)
        score = functools.partial(orpo_score, beta=beta)
        placement = resolve_placement(config.hardware)

        tokenizer = modeling.load_tokenizer(config.model)
        pairs = pref_data.read_pairs(run_dir, "train"), pref_data.read_pairs(run_dir, "eval")
        train = pref_data.encode_pairs(tokenizer, pairs[0], args.max_seq_len)
        held_out = pref_data.encode_pairs(tokenizer, pairs[1], args.max_seq_len)
        pad_id = tokenizer.pad_token_id

        truncated = train.truncated_rows + held_out.truncated_rows
        training = lifecycle.start(run_dir, report, config, placement, len(train), truncated)
        model, plan, opt, state = training.model, training.plan, training.opt, training.state
        print(
            f"ORPO (beta {beta:g}) on {config.model.name}, {placement.device} "
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
        pref_data.finish(run_dir, report, config, model, tokenizer, pairs, held_out, score, beta,
                         state, plan.epoch_at(state.step), metrics)  # fmt: skip
        return "succeeded"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m dragonfarm_core.trainers.orpo RUN_DIR")
    main(sys.argv[1])
