"""Fixtures for the pipeline tests: the run-lifecycle fixtures (fake trainer, runs dir, small
datasets, teardown that kills every process a test started), a pairs dataset, and a stand-in
inference backend whose samples differ, so a judge can rank them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.data.dataset import Dataset, dataset
from tests.rundir.conftest import (  # noqa: F401  (fixtures, found by name)
    _kill_children,
    fake_env,
    model_dir,
    runs_root,
    sft_data,
    tickets_csv,
    wait_for,
)


class SamplingBackend:
    """A local-style backend: reply k to a prompt is "<prompt> #k" (k counts per prompt), so
    samples differ; the adapter's replies start "tuned:", the base's "base:"."""

    name = "local"
    model = None

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}

    def chat(self, model, messages, sampling, on_token=None):
        return self.generate(model, [messages], sampling)[0]

    def generate(self, model, conversations, sampling):
        tuned = bool(model and model.use_adapter and model.adapter)
        out = []
        for conv in conversations:
            last = conv[-1]["content"]
            k = self.seen[last] = self.seen.get(last, 0) + 1
            out.append(f"{'tuned' if tuned else 'base'}: {last} #{k}")
        return out


@pytest.fixture
def backend() -> Iterator[SamplingBackend]:
    fake = SamplingBackend()
    previous = dragon.set_backend(fake)
    yield fake
    dragon.set_backend(previous)


@pytest.fixture
def pairs_data(tmp_path: Path) -> Dataset:
    rows = [{"q": f"Question {i}?", "good": f"Good {i}.", "bad": f"Bad {i}."} for i in range(12)]
    path = tmp_path / "pairs.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return dataset(path).map_pairs(prompt="q", chosen="good", rejected="bad")
