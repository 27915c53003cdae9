"""Fixtures for the UI handler tests: a runs folder, small data files, a chat-template model.

Handlers are plain functions, so these tests call them directly: no server, no browser.
Trainers started in a `runs_dir` are tests/fake_trainer.py (DRAGONFARM_TRAINER_MODULE), so a
run takes well under a second and needs no model weights.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.models import ResolvedModel
from dragonfarm_core.rundir import files, launch, location

TESTS_DIR = Path(__file__).resolve().parents[1]
FAKE_TRAINER_KNOBS = ("STEPS", "STEP_S", "FAIL_AT", "SAVE_EVERY", "IGNORE_CANCEL", "IGNORE_TERM",
                      "NO_FINAL")  # fmt: skip

# ChatML, with the end-of-turn token from tokenizer_config.json, like most small chat models.
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + eos_token + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

QA_ROWS = [
    {
        "question": "How do I reset my router?",
        "topic": "network",
        "answer": "Hold the reset pin for 10 s.",
    },
    {
        "question": "Why is the light red?",
        "topic": "hardware",
        "answer": "The unit lost power; replug it.",
    },
    {
        "question": "Can I change my plan?",
        "topic": "billing",
        "answer": "Yes, under Account > Plan.",
    },
]


@pytest.fixture
def uploads_dir(tmp_path: Path) -> Path:
    return tmp_path / "runs" / "uploads"


@pytest.fixture
def qa_csv(tmp_path: Path) -> Path:
    """A small CSV as a person would upload it (in Gradio's temp folder, not the runs folder)."""
    path = tmp_path / "gradio-tmp" / "qa.csv"
    path.parent.mkdir()
    pd.DataFrame(QA_ROWS).to_csv(path, index=False)
    return path


@pytest.fixture
def model(tmp_path: Path) -> ResolvedModel:
    """A model folder with only a config: enough for runs the fake trainer trains."""
    folder = tmp_path / "models" / "Tiny-Model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return ResolvedModel(str(folder), str(folder), None)


@pytest.fixture
def chat_model(tmp_path: Path) -> ResolvedModel:
    """A model folder with only what previews need: config and a ChatML chat template."""
    folder = tmp_path / "chat-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    config = {"chat_template": CHATML, "eos_token": "<|im_end|>", "bos_token": "<s>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return ResolvedModel(str(folder), str(folder), None)


@pytest.fixture
def runs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A runs folder whose trainers are the fake one; none outlives the test."""
    monkeypatch.setenv("DRAGONFARM_TRAINER_MODULE", "fake_trainer")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])
    )
    for knob in FAKE_TRAINER_KNOBS:
        monkeypatch.delenv(f"FAKE_TRAINER_{knob}", raising=False)
    monkeypatch.delenv(location.ENV_VAR, raising=False)
    monkeypatch.setattr(location, "_configured", None)
    root = tmp_path / "runs"
    root.mkdir()
    yield root
    for config in root.rglob(files.CONFIG):
        status = files.read_status(config.parent)
        if launch.process_alive(status):
            os.killpg(status["pid"], 9)


@pytest.fixture
def tickets(tmp_path: Path) -> dragon.Dataset:
    """24 support tickets with a question and an answer, read from a CSV, not mapped yet."""
    rows = [{"question": f"Device {i} reboots", "answer": f"Reset it ({i})."} for i in range(24)]
    pd.DataFrame(rows).to_csv(tmp_path / "tickets.csv", index=False)
    return dragon.dataset(tmp_path / "tickets.csv")


@pytest.fixture
def mapped(tickets: dragon.Dataset) -> dragon.Dataset:
    """The tickets mapped for SFT: question -> answer."""
    return tickets.map(prompt="question", response="answer")
