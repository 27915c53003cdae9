"""Length-grouped batches and the step plan."""

from __future__ import annotations

import random

import pytest
import torch

from dragonfarm_core.trainers.batching import (
    collate,
    grouped_batches,
    plan_steps,
    sorted_batches,
)
from dragonfarm_core.trainers.sft_data import IGNORE, Encoded


def _lengths(n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(20, 500) for _ in range(n)]


def _padding_fraction(lengths: list[int], batches: list[list[int]]) -> float:
    slots = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    return 1 - sum(lengths) / slots


def test_every_row_once_per_epoch_and_order_depends_on_seed_and_epoch():
    lengths = _lengths(1000)
    a = grouped_batches(lengths, 8, seed=1, epoch=0)
    assert sorted(i for b in a for i in b) == list(range(1000))
    assert all(len(b) <= 8 for b in a)
    assert a == grouped_batches(lengths, 8, seed=1, epoch=0)
    assert a != grouped_batches(lengths, 8, seed=1, epoch=1)
    assert a != grouped_batches(lengths, 8, seed=2, epoch=0)


def test_grouping_removes_most_padding():
    lengths = _lengths(2000)
    grouped = _padding_fraction(lengths, grouped_batches(lengths, 8, seed=0, epoch=0))
    order = list(range(2000))
    random.Random(0).shuffle(order)
    shuffled = _padding_fraction(lengths, [order[i : i + 8] for i in range(0, 2000, 8)])
    assert shuffled > 0.3
    assert grouped < 0.05


def test_sorted_batches_cover_all_rows():
    lengths = _lengths(50)
    batches = sorted_batches(lengths, 8)
    assert sorted(i for b in batches for i in b) == list(range(50))
    firsts = [lengths[b[0]] for b in batches]
    assert firsts == sorted(firsts, reverse=True)


def test_plan_by_epochs_and_locate():
    plan = plan_steps(n_rows=50, batch_size=4, grad_accum=3, epochs=2, max_steps=None)
    assert plan.batches_per_epoch == 13 and plan.steps_per_epoch == 5
    assert plan.total_steps == 10
    assert plan.locate(1) == (0, slice(0, 3))
    assert plan.locate(5) == (0, slice(12, 13))  # the epoch's last, shorter step
    assert plan.locate(6) == (1, slice(0, 3))
    assert plan.epoch_at(5) == 1.0
    seen = [i for s in range(1, 6) for i in range(13)[plan.locate(s)[1]]]
    assert seen == list(range(13))


@pytest.mark.parametrize(("epochs", "max_steps", "total"), [(0.5, None, 3), (3, 7, 7), (1, 12, 12)])
def test_plan_fractional_epochs_and_max_steps(epochs, max_steps, total):
    plan = plan_steps(n_rows=50, batch_size=4, grad_accum=3, epochs=epochs, max_steps=max_steps)
    assert plan.total_steps == total
    assert plan.locate(12) == (2, slice(3, 6))  # max_steps past the data cycles through epochs


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
