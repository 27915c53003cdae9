"""LoRA Direct Preference Optimization on TRL's DPOTrainer: what a run with method "dpo" executes.

    python -m dragonfarm_core.trainers.dpo RUN_DIR

(That skips the queue; the launcher runs `python -m dragonfarm_core.trainers RUN_DIR`.)
DPO (Rafailov et al., 2023) raises the model's implicit reward of the chosen reply above the
rejected one, where a reply's reward is beta x (log p_policy - log p_reference) of its tokens.
The reference is the same model with the LoRA adapter switched off, so it costs no second copy
in memory; continuing from a finished run folds that run's adapters into the base first, so the
reference is that run. How the margin becomes a loss is TRL's `loss_type` (DpoArgs: sigmoid,
DPO's own; hinge; ipo; robust, with its label smoothing), the held-out pairs scored the same way.

Reads top to bottom: config, pairs (tokenized here as SFT rows are: the chat template, the
prompt masked, truncation counted), the model with its adapter, `DPOConfig` from the spec,
`DPOTrainer`, train (resuming from a complete checkpoint), adapter, final eval and samples
(pref_data.finish). `TrainArgs.batch_size` counts pairs (two rows each). Training rows take
pref_acc and reward_margin from TRL's rewards/accuracies and rewards/margins; the held-out
columns and eval.json come from `dpo_score` over the held-out pairs.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from dragonfarm_core.method_args import DPO_LOSSES, DpoArgs
from dragonfarm_core.rundir import allocator
from dragonfarm_core.rundir.train_config import load_config
from dragonfarm_core.trainers import lifecycle, modeling, pref_data, trl_run
from dragonfarm_core.trainers.common import reported_run
from dragonfarm_core.trainers.placement import resolve_placement
from dragonfarm_core.trainers.pref_data import EncodedPairs, PairScores
from dragonfarm_core.trainers.sft_data import IGNORE


def dpo_loss(policy: torch.Tensor, reference: torch.Tensor, n: int, beta: float,
             loss_type: str = "sigmoid", label_smoothing: float = 0.0,
             tokens: torch.Tensor | None = None) -> PairScores:  # fmt: skip
    """DPO from summed reply log-probabilities; rows 0..n-1 are chosen, n..2n-1 rejected.

    Each loss of method_args.DPO_LOSSES as TRL's DPOTrainer computes it (a test holds the two
    equal). Written out because TRL's is inside `_compute_loss`, which runs its own forward
    passes and returns only the batch's mean, where the held-out measure needs each pair's loss
    and rewards from the reply-only scoring. `tokens` (each row's reply tokens) is IPO's."""
    chosen = beta * (policy[:n] - reference[:n])
    rejected = beta * (policy[n:] - reference[n:])
    margin = chosen - rejected
    if loss_type == "sigmoid":
        loss = -F.logsigmoid(margin)
    elif loss_type == "hinge":
        loss = torch.relu(1 - margin)
    elif loss_type == "robust":
        e = label_smoothing
        loss = (-(1 - e) * F.logsigmoid(margin) + e * F.logsigmoid(-margin)) / (1 - 2 * e)
    elif loss_type == "ipo" and tokens is not None:
        per_token = (policy - reference) / tokens.clamp(min=1)
        loss = (per_token[:n] - per_token[n:] - 1 / (2 * beta)) ** 2
    else:
        raise ValueError(f"DPO loss_type {loss_type!r}: one of {', '.join(DPO_LOSSES)} "
                         "(ipo needs each row's reply token counts).")  # fmt: skip
    return PairScores(loss=loss, chosen=chosen, rejected=rejected)


def dpo_score(model: Any, batch: dict[str, torch.Tensor], n: int, beta: float,
              loss_type: str = "sigmoid", label_smoothing: float = 0.0) -> PairScores:  # fmt: skip
    """The held-out measure: DPO's loss and rewards, the reference with the adapter off."""
    policy, tokens = pref_data.reply_logps(model, batch)
    with torch.no_grad(), model.disable_adapter():
        reference, _ = pref_data.reply_logps(model, batch)
    return dpo_loss(policy, reference, n, beta, loss_type, label_smoothing, tokens)


class PairCollator:
    """DPOTrainer's batch from our encoded pairs: the chosen rows, then their rejected rows,
    with `completion_mask` on the reply tokens (the prompt masked as in SFT)."""

    def __init__(self, data: EncodedPairs, pad_id: int) -> None:
        self.data, self.pad_id = data, pad_id

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = self.data.batch([int(e["pair"]) for e in examples], self.pad_id)
        labels = batch.pop("labels")
        return {**batch, "completion_mask": (labels != IGNORE).long()}


def pretokenized(trainer_class: type) -> type:
    """DPOTrainer taking pairs already tokenized: its own preparation (prompt extraction, the
    chat template, tokenization) has no option to skip, and would tokenize a second time with
    another truncation than the one counted in status.json."""

    class Pretokenized(trainer_class):
        def _prepare_dataset(self, dataset: Any, *args: Any, **kwargs: Any) -> Any:
            return dataset

    return Pretokenized


def main(run_dir: str | os.PathLike[str]) -> str:
    """Train the DPO run in `run_dir`; returns "succeeded" or "cancelled".

    On any error status.json says failed (with reason, error and log tail) and the exception
    propagates. A complete checkpoint in the run directory is resumed from.
    """
    run_dir = Path(run_dir)
    # Each step's tensors reuse the pages of the step before (1.2x a step on a CPU).
    allocator.keep_freed_memory()
    with reported_run(run_dir) as report:
        config = load_config(run_dir)
        args = config.args
        settings = DpoArgs.from_dict(config.method_args)
        beta = settings.beta
        placement = resolve_placement(config.hardware, config.model.base)
        tokenizer = modeling.load_tokenizer(config.model)
        pairs = pref_data.read_pairs(run_dir, "train"), pref_data.read_pairs(run_dir, "eval")
        train = pref_data.encode_pairs(tokenizer, pairs[0], args.max_seq_len)
        held_out = pref_data.encode_pairs(tokenizer, pairs[1], args.max_seq_len)

        from transformers import PrinterCallback
        from trl import DPOConfig, DPOTrainer

        truncated = train.truncated_rows + held_out.truncated_rows
        model, plan, trainable, total = lifecycle.model_and_plan(
            report, config, placement, len(train), truncated
        )
        score = functools.partial(dpo_score, **settings.to_dict())

        callback = pref_data.run_callback(run_dir, report, config, held_out, tokenizer, score)
        dpo_args = trl_run.arguments(DPOConfig, config, placement, run_dir, beta=beta,
                                     loss_type=[settings.loss_type],
                                     label_smoothing=settings.label_smoothing,
                                     max_length=args.max_seq_len)  # fmt: skip
        trainer = trl_run.counted(pretokenized(DPOTrainer))(
            model=model,
            args=dpo_args,
            data_collator=PairCollator(train, tokenizer.pad_token_id),
            train_dataset=pref_data.as_dataset(train),
            processing_class=tokenizer,
            callbacks=[callback],
        )
        # Given a model that already has its adapter, DPOTrainer adds a frozen copy named "ref"
        # as the reference. Our adapter is new (zero at the start), so that copy is the base
        # model: without it TRL switches the adapter off instead, as for an adapter it made
        # itself (no second adapter in the forward pass, the checkpoints or the saved run).
        model.delete_adapter("ref")
        trainer.remove_callback(PrinterCallback)  # progress.jsonl has the rows
        what = f"DPO ({settings.loss_type} loss, beta {beta:g})"
        pref_data.announce(report, what, config, placement, len(train), plan.total_steps,
                           trainable, total)  # fmt: skip

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
        sys.exit("usage: python -m dragonfarm_core.trainers.dpo RUN_DIR")
    main(sys.argv[1])
