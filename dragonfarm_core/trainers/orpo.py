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

Reads top to bottom like dpo.py: config, pairs (tokenized as SFT rows are), the model with its
adapter, `ORPOConfig` from the spec, TRL's `ORPOTrainer` (trl.experimental.orpo) with the
reply-only scoring of `ours`, train (resuming from a complete checkpoint), adapter, final eval
and samples (pref_data.finish). Training rows take pref_acc and reward_margin from TRL's
rewards/accuracies and rewards/margins; the held-out columns and eval.json from `orpo_score`.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from dragonfarm_core.rundir.train_config import load_config
from dragonfarm_core.trainers import lifecycle, modeling, pref_data, trl_run
from dragonfarm_core.trainers.common import reported_run
from dragonfarm_core.trainers.placement import resolve_placement
from dragonfarm_core.trainers.pref_data import EncodedPairs, PairScores, reply_logps

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


class PairBatches:
    """ORPOTrainer's batch from our encoded pairs: the chosen rows, then their rejected rows,
    with the reply tokens as labels (the prompt masked as in SFT)."""

    def __init__(self, data: EncodedPairs, pad_id: int) -> None:
        self.data, self.pad_id = data, pad_id

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        return self.data.batch([int(e["pair"]) for e in examples], self.pad_id)


def ours(trainer_class: type) -> type:
    """ORPOTrainer on pairs already tokenized, scoring only the reply tokens.

    Its own preparation (prompt extraction, chat template, tokenize_row) would tokenize a
    second time with another truncation than the one counted in status.json, so tokenize_row
    passes the rows through. Its forward pass projects every position through the LM head and
    takes its supervised loss over the prompt and the reply; ours applies the head only where a
    reply token is predicted (pref_data.reply_logps) and takes the supervised loss on the
    chosen reply alone, as the paper's L_SFT and the loss above: ORPOTrainer's odds-ratio
    loss, rewards and metrics are then computed from these as they are."""

    class Ours(trainer_class):
        def tokenize_row(self, feature: dict[str, Any], model: Any = None) -> dict[str, Any]:
            return feature

        def concatenated_forward(self, model: Any, batch: dict[str, torch.Tensor]) -> tuple:
            logps, counts = reply_logps(model, batch)
            mean, n = logps / counts.clamp(min=1), len(logps) // 2
            # ORPOTrainer logs each side's mean logit; the reply's log-probability stands in,
            # the logits of every position being what is not computed here.
            return (
                mean[:n],
                mean[n:],
                mean[:n, None].detach(),
                mean[n:, None].detach(),
                -mean[:n].mean(),
            )

    Ours.__name__ = Ours.__qualname__ = f"Ours{trainer_class.__name__}"
    return Ours


def main(run_dir: str | os.PathLike[str]) -> str:
    """Train the ORPO run in `run_dir`; returns "succeeded" or "cancelled".

    On any error status.json says failed (with reason, error and log tail) and the exception
    propagates. A complete checkpoint is resumed from.
    """
    run_dir = Path(run_dir)
    with reported_run(run_dir) as report:
        config = load_config(run_dir)
        args = config.args
        settings = pref_data.read_settings(config)
        beta = settings.beta
        score = functools.partial(orpo_score, beta=beta)
        placement = resolve_placement(config.hardware, config.model.base)
        tokenizer = modeling.load_tokenizer(config.model)
        pairs = pref_data.read_pairs(run_dir, "train"), pref_data.read_pairs(run_dir, "eval")
        train = pref_data.encode_pairs(tokenizer, pairs[0], args.max_seq_len)
        held_out = pref_data.encode_pairs(tokenizer, pairs[1], args.max_seq_len)

        from transformers import PrinterCallback
        from trl.experimental.orpo import ORPOConfig, ORPOTrainer

        truncated = train.truncated_rows + held_out.truncated_rows
        model, plan, trainable, total = lifecycle.model_and_plan(
            report, config, placement, len(train), truncated
        )

        callback = pref_data.run_callback(run_dir, report, config, held_out, tokenizer, score)
        orpo_args = trl_run.arguments(ORPOConfig, config, placement, run_dir, beta=beta,
                                      max_length=args.max_seq_len)  # fmt: skip
        trainer = trl_run.counted(ours(ORPOTrainer))(
            model=model,
            args=orpo_args,
            data_collator=PairBatches(train, tokenizer.pad_token_id),
            train_dataset=pref_data.as_dataset(train),
            processing_class=tokenizer,
            callbacks=[callback],
        )
        trainer.remove_callback(PrinterCallback)  # progress.jsonl has the rows
        pref_data.announce(report, f"ORPO (beta {beta:g})", config, placement, len(train),
                           plan.total_steps, trainable, total)  # fmt: skip

        cancelled = trl_run.train(trainer, run_dir, callback)
        if not report.writes:  # one of several processes: rank 0 writes the results
            return "cancelled" if cancelled else "succeeded"
        state = callback.state
        metrics = lifecycle.stop(run_dir, report, model, state, cancelled)
        if metrics is None:
            return "cancelled"
        pref_data.finish(run_dir, report, config, model, tokenizer, pairs, held_out, score,
                         settings, state, plan.epoch_at(state.step), metrics)  # fmt: skip
        return "succeeded"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m dragonfarm_core.trainers.orpo RUN_DIR")
    main(sys.argv[1])
