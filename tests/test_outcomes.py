"""Does post-training work? bench/outcomes.py's sft, dpo and grpo stages with smaller budgets and
looser thresholds than the benchmark reports (slow: minutes on a CPU). Its `judged` stage (DPO on
pairs a judge ranked from the SFT run's own samples) is measured there but not asserted here: its
samples are seeded now, and across seeds it wins, ties or loses (DPO lr 5e-4, 2 epochs: 3W 1L with
seed 42, 5W 5L with seed 1, 3W 5L with seed 2, 2W 4L with seed 3; lr 2e-3, 4 epochs: 8W 1L with
seed 3 but 5W 8L with seed 2; see `judged`'s docstring): no honest test. From all 180 prompts
(102 pairs, lr 2e-3, 2 epochs) seed 2 won 12W 7T 1L; until other seeds agree, no test either."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import dragonfarm_core as dragon

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def outcomes():
    spec = importlib.util.spec_from_file_location("outcomes", ROOT / "bench" / "outcomes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    yield module
    dragon.worker_stop()


def test_sft_lowers_held_out_loss_and_teaches_the_house_style(outcomes, tmp_path):
    out = outcomes.sft(tmp_path, epochs=6)
    assert out["loss_drop"] >= 0.5
    assert out["style_base"] <= 0.05
    assert out["style"] >= 0.2


def test_dpo_learns_to_prefer_the_house_style(outcomes, tmp_path):
    out = outcomes.dpo(tmp_path, epochs=1)
    assert out["before"] == pytest.approx(0.5)
    assert out["after"] >= 0.8


def test_grpo_raises_the_held_out_reward(outcomes, tmp_path):
    out = outcomes.grpo(tmp_path, steps=30)
    assert out["after"] >= out["before"] + 0.15
