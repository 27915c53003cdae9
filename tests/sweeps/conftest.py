"""Fixtures for the sweep tests: the run-lifecycle fixtures (the fake trainer, here logging a
held-out loss that depends on the learning rate and the LoRA rank; a runs dir; a small dataset;
teardown that kills every process a test started)."""

from __future__ import annotations

import pytest

import dragonfarm_core as dragon
from tests.rundir.conftest import (  # noqa: F401  (fixtures, found by name)
    _kill_children,
    fake_env,
    kill_runs_under,
    model_dir,
    runs_root,
    sft_data,
    tickets_csv,
    wait_for,
)


@pytest.fixture
def evaluating(monkeypatch):
    """The fake trainer logs a held-out loss every other step (8 steps, 0.2 s each)."""
    monkeypatch.setenv("FAKE_TRAINER_EVAL", "1")
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "8")
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.2")


@pytest.fixture
def base(model_dir, sft_data):  # noqa: F811  (the imported fixtures, by name)
    """The run every trial varies: SFT of the stand-in model on the tickets."""
    return dragon.RunSpec("sft", sft_data, str(model_dir), lora=dragon.Lora(r=8),
                          args=dragon.TrainArgs(learning_rate=1e-3, epochs=1))  # fmt: skip
