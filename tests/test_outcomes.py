"""Does post-training work? bench/outcomes.py's sft, dpo and grpo stages with smaller budgets and
looser thresholds than the benchmark reports (slow: minutes on a CPU). Its `judged` stage (DPO on
pairs a judge ranked from the SFT run's own samples) is measured there but not asserted here: its
samples are seeded, and across seeds it wins, ties or loses (from all 180 prompts, DPO lr 2e-3,
2 epochs, after the SFT on TRL: 6W 2L with seed 42, 5W 8L with seed 1, 7W 0L with seed 2; see
bench/outcomes.py's docstring): no honest test until one setting wins on every seed."""

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
    assert out["before"] == 0.0  # policy = reference: every pair ties, and a tie is no win
    assert out["after"] >= 0.8


def test_grpo_raises_the_held_out_reward(outcomes, tmp_path):
    out = outcomes.grpo(tmp_path, steps=30)
    assert out["after"] >= out["before"] + 0.15
