"""Preference pairs for DPO and ORPO: read, tokenize with masking, score, sample.

A pair row (data/*.jsonl) is `{"prompt": [messages ending with a user turn], "chosen":
[assistant message], "rejected": [assistant message]}`. Each side is tokenized as a whole
conversation (prompt + reply) by the SFT encoder, so the prompt is masked exactly as in SFT and
only the reply's tokens are scored. A batch puts the chosen rows first and the rejected rows
after them, so one forward pass scores both sides of every pair.

Both methods turn a batch into `PairScores` (a loss and an implicit reward per side, per pair);
what is logged, evaluated and written (pref_acc, reward_margin, eval.json, samples.json) follows
from those scores alone, so it means the same for DPO and ORPO.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dragonfarm_core.chat_template import ROLES
from dragonfarm_core.method_args import PreferenceArgs
from dragonfarm_core.methods import METHODS
from dragonfarm_core.rundir import files
from dragonfarm_core.rundir.train_config import TrainConfig
from dragonfarm_core.settings import SettingsError
from dragonfarm_core.trainers import sft_data
from dragonfarm_core.trainers.batching import collate, sorted_batches
from dragonfarm_core.trainers.common import DataError, RunReporter, TrainState
from dragonfarm_core.trainers.evaluation import add_before, generate_samples
from dragonfarm_core.trainers.modeling import learned_losses
from dragonfarm_core.trainers.placement import Placement, processes_note
from dragonfarm_core.trainers.sft_data import Encoded, read_rows

Pair = dict[str, list[dict[str, str]]]
# Columns pairs runs add to progress.jsonl (docs/ARCHITECTURE.md).
PREF_COLUMNS = ("pref_acc", "reward_margin", "eval_pref_acc", "eval_reward_margin")


def read_settings(config: TrainConfig) -> PreferenceArgs:
    """config.json's method_args for DPO (DpoArgs) and ORPO (PreferenceArgs), checked."""
    group = METHODS[config.method].settings
    if group is None or not issubclass(group, PreferenceArgs):
        raise SettingsError(f"config.json method {config.method!r} is not DPO or ORPO.")
    return group.from_dict(config.method_args)


def _check_messages(value: Any, field: str, last_role: str, where: str) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise DataError(f"{where}: {field!r} must be a non-empty list of {{role, content}}.")
    for m in value:
        if (
            not isinstance(m, dict)
            or m.get("role") not in ROLES
            or not isinstance(m.get("content"), str)
        ):
            raise DataError(
                f"{where}: each message in {field!r} needs a role "
                f"({', '.join(ROLES)}) and a text content; got {str(m)[:120]}."
            )
    if value[-1]["role"] != last_role:
        raise DataError(
            f"{where}: {field!r} must end with a {last_role} turn, not {value[-1]['role']!r}."
        )
    return value


def read_pairs(run_dir: str | os.PathLike[str], split: str) -> list[Pair]:
    """The pairs of data/<split>.jsonl, checked; a missing eval file means no held-out pairs."""
    pairs = []
    for where, row in read_rows(run_dir, split):
        if not isinstance(row, dict) or not {"prompt", "chosen", "rejected"} <= row.keys():
            raise DataError(
                f"{where} is not a preference pair; DPO and ORPO need "
                '{"prompt": [...], "chosen": [...], "rejected": [...]} rows '
                "(map the dataset with .map_pairs())."
            )
        pairs.append(
            {
                "prompt": _check_messages(row["prompt"], "prompt", "user", where),
                "chosen": _check_messages(row["chosen"], "chosen", "assistant", where),
                "rejected": _check_messages(row["rejected"], "rejected", "assistant", where),
            }
        )
    return pairs


@dataclass
class EncodedPairs:
    """Both sides of every pair, tokenized: rows 0..n-1 chosen, rows n..2n-1 rejected."""

    sides: Encoded

    def __len__(self) -> int:
        return len(self.sides) // 2

    @property
    def lengths(self) -> list[int]:
        """A pair's length is its longer side: that is the width it pads a batch to."""
        n, lengths = len(self), self.sides.lengths
        return [max(lengths[i], lengths[n + i]) for i in range(n)]

    @property
    def truncated_rows(self) -> int:
        return self.sides.truncated_rows

    def batch(self, pairs: list[int], pad_id: int) -> dict[str, torch.Tensor]:
        """Chosen rows of `pairs`, then their rejected rows, right-padded to one width."""
        return collate(self.sides, pairs + [len(self) + i for i in pairs], pad_id)


def encode_pairs(tokenizer: Any, pairs: list[Pair], max_len: int) -> EncodedPairs:
    """Tokenize prompt + chosen and prompt + rejected; mask the prompt; truncate to max_len."""
    conversations = [p["prompt"] + p["chosen"] for p in pairs]
    conversations += [p["prompt"] + p["rejected"] for p in pairs]
    return EncodedPairs(sft_data.encode(tokenizer, conversations, max_len))


def reply_logps(model: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed log-probability of each row's reply tokens, number of those tokens).

    Like `modeling.label_loss`, the LM head runs only where a reply token is predicted.
    """
    losses, keep = learned_losses(model, batch)
    rows = keep.nonzero()[:, 0]
    sums = torch.zeros(len(keep), device=losses.device).index_add(0, rows, -losses)
    return sums, keep.sum(dim=1)


@dataclass
class PairScores:
    """Per pair: the method's loss, and its implicit reward of the chosen and rejected reply."""

    loss: torch.Tensor
    chosen: torch.Tensor
    rejected: torch.Tensor

    @property
    def margin(self) -> torch.Tensor:
        return self.chosen - self.rejected

    def correct(self) -> torch.Tensor:
        """1 where the chosen reply scores strictly higher, else 0 (a tie too), as TRL's
        rewards/accuracies counts: an untrained DPO adapter (policy = reference) scores 0."""
        return (self.margin > 0).float()


Score = Callable[[Any, dict[str, torch.Tensor], int], PairScores]


@torch.inference_mode()
def evaluate_pairs(
    model: Any, data: EncodedPairs, batch_size: int, pad_id: int, score: Score
) -> dict[str, Any]:
    """Held-out loss, preference accuracy and mean reward margin over every pair of `data`."""
    if not len(data):
        return {"eval_loss": None, "pref_accuracy": None, "reward_margin": None, "eval_pairs": 0}
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    loss = correct = margin = 0.0
    for pairs in sorted_batches(data.lengths, batch_size):
        batch = {k: v.to(device) for k, v in data.batch(pairs, pad_id).items()}
        scores = score(model, batch, len(pairs))
        loss += float(scores.loss.sum())
        correct += float(scores.correct().sum())
        margin += float(scores.margin.sum())
    model.train(was_training)
    n = len(data)
    return {
        "eval_loss": loss / n,
        "pref_accuracy": correct / n,
        "reward_margin": margin / n,
        "eval_pairs": n,
    }


def write_pair_samples(
    run_dir: str | os.PathLike[str],
    model: Any,
    tokenizer: Any,
    pairs: list[Pair],
    split: str,
    n: int,
    max_new_tokens: int,
    max_len: int,
) -> list[dict[str, Any]]:
    """samples.json: prompt (last user turn), reference (chosen), rejected, generated, and
    `before` for the first few (`evaluation.add_before`); prompts cut to `max_len`."""
    chosen = pairs[:n]
    conversations = [p["prompt"] + p["chosen"] for p in chosen]
    replies = generate_samples(model, tokenizer, conversations, max_new_tokens, max_len)
    samples = [
        {
            "prompt": next(m["content"] for m in reversed(p["prompt"]) if m["role"] == "user"),
            "reference": p["chosen"][-1]["content"],
            "rejected": p["rejected"][-1]["content"],
            "generated": g,
            "split": split,
        }
        for p, g in zip(chosen, replies, strict=True)
    ]
    add_before(samples, model, tokenizer, conversations, max_new_tokens, max_len)
    files.write_samples(run_dir, samples)
    return samples


def finish(
    run_dir: Path, report: RunReporter, config: TrainConfig, model: Any, tokenizer: Any,
    pairs: tuple[list[Pair], list[Pair]], held_out: EncodedPairs, score: Score,
    settings: PreferenceArgs, state: TrainState, epoch: float, metrics: dict[str, Any],
) -> None:  # fmt: skip
    """After the last step (DPO and ORPO, both on TRL): eval.json, the last held-out row,
    samples.json, and status "succeeded" with the metrics. `pairs` is (train, eval)."""
    args, (train_pairs, eval_pairs) = config.args, pairs
    results = evaluate_pairs(model, held_out, args.batch_size, tokenizer.pad_token_id, score)
    files.write_eval(run_dir, {**results, "method": config.method, **settings.to_dict(),
                               "step": state.step})  # fmt: skip
    if len(held_out):
        log_progress(report, step=state.step, epoch=epoch, elapsed_s=round(state.elapsed_s, 2),
                     **eval_columns(results))  # fmt: skip
    write_pair_samples(
        run_dir, model, tokenizer, eval_pairs or train_pairs, "eval" if eval_pairs else "train",
        config.n_samples, config.extra.sample_max_new_tokens, args.max_seq_len,
    )  # fmt: skip
    metrics.update(results)
    report.finish("succeeded", metrics=metrics)
    print(f"Done: train loss {metrics['train_loss']:.4f}, held-out preference accuracy "
          f"{results['pref_accuracy']}.", flush=True)  # fmt: skip


def announce(report: RunReporter, what: str, config: TrainConfig, placement: Placement,
             n_pairs: int, steps: int, trainable: int, total: int) -> None:  # fmt: skip
    """The run's first line in train.log (rank 0's alone, in a run of several processes)."""
    if report.writes:
        processes = processes_note()
        print(f"{what} on {config.model.name}, {placement.device} ({placement.dtype_name}"
              f"{processes}): {n_pairs} pairs, {steps} steps, {trainable:,} of {total:,} "
              "parameters trainable.", flush=True)  # fmt: skip


def log_progress(report: RunReporter, **values: Any) -> None:
    """A progress row with the preference columns always present (null when not measured)."""
    report.progress(**(dict.fromkeys(PREF_COLUMNS) | values))


def eval_columns(results: dict[str, Any]) -> dict[str, Any]:
    """`evaluate_pairs` results under their progress.jsonl names."""
    return {
        "eval_loss": results["eval_loss"],
        "eval_pref_acc": results["pref_accuracy"],
        "eval_reward_margin": results["reward_margin"],
    }


def as_dataset(data: EncodedPairs) -> Any:
    """One row per pair for a TRL trainer's sampler (DPO, ORPO): its index (the collator looks
    the tokens up) and its length (the longer side), by which batches of similar length are
    grouped."""
    from datasets import Dataset

    return Dataset.from_dict({"pair": list(range(len(data))), "length": data.lengths})


def training_columns(logs: dict[str, Any]) -> dict[str, Any]:
    """TRL's logged preference metrics under their progress.jsonl names."""
    return {"pref_acc": logs.get("rewards/accuracies"),
            "reward_margin": logs.get("rewards/margins")}  # fmt: skip


def run_callback(run_dir: Path, report: RunReporter, config: TrainConfig, held_out: EncodedPairs,
                 tokenizer: Any, score: Score) -> Any:  # fmt: skip
    """The RunCallback of a DPO or ORPO run: the preference columns, TRL's logged rewards
    under their names, and the held-out pairs scored by `score` (none without held-out pairs)."""
    from dragonfarm_core.trainers import trl_run

    def held_out_scores(model: Any) -> dict[str, Any]:
        batch, pad_id = config.args.batch_size, tokenizer.pad_token_id
        return eval_columns(evaluate_pairs(model, held_out, batch, pad_id, score))

    evaluate = held_out_scores if len(held_out) else None
    return trl_run.RunCallback(run_dir, report, config, evaluate, PREF_COLUMNS, training_columns)
