"""synthesize_pairs seeds the student's samples: the seed (42 unless given, None for fresh
samples) reaches the inference backend with every batched call and is recorded with the
pairs; a pairs job refuses a seed no backend takes before it starts."""

from __future__ import annotations

from pathlib import Path

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.batches import synthesis as synthesis_jobs
from dragonfarm_core.inference import Sampling
from dragonfarm_core.rundir import files
from tests.llm.llm_fakes import isolated_runs_dir


@pytest.fixture(autouse=True)
def runs(tmp_path, monkeypatch) -> Path:
    return isolated_runs_dir(tmp_path, monkeypatch)


class Recording:
    """A backend answering with its own model (like a server): a good and a bad sample of each
    prompt in turn, and the sampling settings of every call."""

    name = "server"
    model = "recording-model"

    def __init__(self) -> None:
        self.sampling: list[Sampling] = []

    def chat(self, model, messages, sampling, on_token=None):
        raise AssertionError("synthesize_pairs asks in batches, through generate")

    def generate(self, model, conversations, sampling):
        self.sampling.append(sampling)
        return [
            f"{'good' if i % 2 == 0 else 'bad'} answer to {c[-1]['content']}"
            for i, c in enumerate(conversations)
        ]


def house_judge(questions: list[str]) -> list[dict]:
    return [{"score": 9 if "good answer" in q else 2, "rationale": "rule"} for q in questions]


@pytest.mark.parametrize(("given", "sent"), [({}, 42), ({"seed": 5}, 5), ({"seed": None}, None)])
def test_the_students_samples_are_drawn_with_the_seed(given, sent):
    backend = Recording()
    previous = dragon.set_backend(backend)
    try:
        pairs = dragon.synthesize_pairs(
            ["Wi-Fi drops", "Invoice wrong?"], "recording-model", judge=house_judge,
            n_samples=2, temperature=0.9, **given,
        )  # fmt: skip
    finally:
        dragon.set_backend(previous)
    assert [s.seed for s in backend.sampling] == [sent]
    assert backend.sampling[0].temperature == 0.9
    assert pairs.synthesis["settings"]["seed"] == sent
    assert [r["chosen"] for r in files.read_jsonl(pairs.source)] == [
        "good answer to Wi-Fi drops", "good answer to Invoice wrong?"
    ]  # fmt: skip


def test_synthesize_pairs_and_a_pairs_job_refuse_a_bad_seed(runs):
    for bad in (-1, 2**32, 1.5):
        with pytest.raises(ValueError, match="seed must be a whole number"):
            dragon.synthesize_pairs(["p"], "m", judge=house_judge, seed=bad)
        with pytest.raises(ValueError, match="seed must be a whole number"):
            synthesis_jobs.start_synthesis(
                "synthesize_pairs", ["p"], {"student": "m", "judge": "m"}, {"seed": bad}, runs
            )
    assert not (runs / files.JOBS_DIR).exists()
