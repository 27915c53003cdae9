"""The step plan, padded batches and length-sorted evaluation batches."""

from __future__ import annotations

import random

import pytest
import torch

from dragonfarm_core.trainers.batching import (
    collate,
    plan_steps,
    sorted_batches,
)
from dragonfarm_core.trainers.sft_data import IGNORE, Encoded


def _lengths(n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(20, 500) for _ in range(n)]


def test_sorted_batches_cover_all_rows():
    lengths = _lengths(50)
    batches = sorted_batches(lengths, 8)
    assert sorted(i for b in batches for i in b) == list(range(50))
    firsts = [lengths[b[0]] for b in batches]
    assert firsts == sorted(firsts, reverse=True)


def test_plan_by_epochs():
    plan = plan_steps(n_rows=50, batch_size=4, grad_accum=3, epochs=2, max_steps=None)
    assert plan.batches_per_epoch == 13 and plan.steps_per_epoch == 5
    assert plan.total_steps == 10
    assert plan.epoch_at(5) == 1.0 and plan.epoch_at(7) == 1.4


@pytest.mark.parametrize(("epochs", "max_steps", "total"), [(0.5, None, 3), (3, 7, 7), (1, 12, 12)])
def test_plan_fractional_epochs_and_max_steps(epochs, max_steps, total):
    plan = plan_steps(n_rows=50, batch_size=4, grad_accum=3, epochs=epochs, max_steps=max_steps)
    assert plan.total_steps == total


def test_collate_pads_right_and_masks_context_and_padding():
    data = Encoded(input_ids=[[5, 6, 7, 8], [9, 10]], n_masked=[2, 1])
    batch = collate(data, [0, 1], pad_id=0, multiple=1)
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8], [9, 10, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert batch["labels"].tolist() == [[IGNORE, IGNORE, 7, 8], [IGNORE, 10, IGNORE, IGNORE]]
    assert batch["labels"].dtype == torch.long


def test_collate_rounds_the_width_up():
    data = Encoded(input_ids=[list(range(17)), list(range(3))], n_masked=[2, 1])
    batch = collate(data, [0, 1], pad_id=0)
    assert batch["input_ids"].shape == (2, 32)
    assert batch["attention_mask"].sum(dim=1).tolist() == [17, 3]
    assert (batch["labels"][:, 17:] == IGNORE).all()
