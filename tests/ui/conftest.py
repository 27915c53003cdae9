"""Fixtures for the UI handler tests: a runs folder, small data files, a chat-template model.

Handlers are plain functions, so these tests call them directly: no server, no browser.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from dragonfarm_core.models import ResolvedModel

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
def chat_model(tmp_path: Path) -> ResolvedModel:
    """A model folder with only what previews need: config and a ChatML chat template."""
    folder = tmp_path / "chat-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    config = {"chat_template": CHATML, "eos_token": "<|im_end|>", "bos_token": "<s>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return ResolvedModel(str(folder), str(folder), None)
