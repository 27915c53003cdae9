"""Does post-training work? bench/outcomes.py's four stages with smaller budgets and looser
thresholds than the benchmark reports (slow: minutes on a CPU)."""

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


@pytest.mark.timeout(2400)  # an SFT run, sampling, a DPO run and the judged comparison
def test_dpo_on_judged_pairs_of_its_own_samples_beats_the_sft_run(outcomes, tmp_path):
    # No labels: the SFT run's samples, ranked by a deterministic house-style judge, are the
    # pairs; the same judge then compares DPO with the SFT run on the held-out tickets.
    out = outcomes.judged(tmp_path, sft_epochs=3, n_prompts=64, n_samples=4, epochs=2)
    assert out["pairs"] >= 8
    assert out["wins"] > out["losses"]
