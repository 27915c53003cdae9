"""Batches and the step plan: how many optimizer steps a run takes, the padded batches of
encoded rows, and length-sorted batches for the held-out measures.

Training batches are TRL's: transformers' length-grouped sampler
(train_sampling_strategy="group_by_length", trl_run.arguments) gives rows of similar length to
a batch in a random order, so almost no padding; packing would move that waste into attention
on a CPU (no variable-length kernel).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from dragonfarm_core.trainers.sft_data import IGNORE, Encoded

# Batch widths are rounded up to a multiple of this. oneDNN builds and caches a kernel per
# matmul shape: with exact widths, bf16 training on a CPU grew by ~12 MB per new length
# (1.3 GB after 40 steps of a 6M model, against 0.87 GB rounded). Costs < 16 pad slots a row.
PAD_MULTIPLE = 16


def sorted_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Deterministic length-sorted batches for evaluation."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


@dataclass(frozen=True)
class StepPlan:
    """Optimizer steps over epochs: each step takes `grad_accum` batches of one epoch; the last
    step of an epoch may take fewer."""

    n_rows: int
    batch_size: int
    grad_accum: int
    total_steps: int

    @property
    def batches_per_epoch(self) -> int:
        return math.ceil(self.n_rows / self.batch_size)

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.batches_per_epoch / self.grad_accum)

    def epoch_at(self, step: int) -> float:
        """Epochs completed after `step` optimizer steps."""
        return round(step / self.steps_per_epoch, 4)


def plan_steps(
    n_rows: int, batch_size: int, grad_accum: int, epochs: float, max_steps: int | None
) -> StepPlan:
    """max_steps, when set, wins over epochs (cycling through the data as often as needed)."""
    plan = StepPlan(n_rows, batch_size, grad_accum, 0)
    total = max_steps or max(1, math.ceil(epochs * plan.steps_per_epoch))
    return StepPlan(n_rows, batch_size, grad_accum, total)


def collate(
    data: Encoded, rows: list[int], pad_id: int, multiple: int = PAD_MULTIPLE
) -> dict[str, torch.Tensor]:
    """Right-padded input_ids, attention_mask and labels (context and padding masked)."""
    longest = max(len(data.input_ids[i]) for i in rows)
    width = -(-longest // multiple) * multiple
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for r, i in enumerate(rows):
        n = len(data.input_ids[i])
        ids[r, :n] = torch.tensor(data.input_ids[i])
        labels[r, :n] = torch.tensor(data.labels(i))
        mask[r, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}
