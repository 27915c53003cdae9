"""Model tab handlers: choosing a model (local folder, bad path, unreachable Hub), presets, check."""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import huggingface_hub.constants
import pytest

import dragonfarm_core
from dragonfarm_core.models import BUNDLED_MODEL_ID
from ui.tabs import model

SKIP = gr.skip()


def test_a_local_model_folder_becomes_the_choice(chat_model):
    chosen, text, code, error = model.choose_model(
        chat_model.base, "", dragonfarm_core.ResolvedModel.bundled()
    )
    assert chosen.base == chat_model.base and error == ""
    assert chat_model.base in text
    assert f'dragon.resolve_model("{chat_model.base}")' in code


def test_a_wrong_name_keeps_the_current_model(tmp_path: Path):
    with pytest.warns(UserWarning):
        out = model.choose_model(
            str(tmp_path / "no such model"), "", dragonfarm_core.ResolvedModel.bundled()
        )
    assert out[:3] == (SKIP,) * 3
    assert "neither a local folder nor a Hugging Face model id" in out[3]
    assert f"Keeping {BUNDLED_MODEL_ID}" in out[3]


def test_an_unreachable_hub_says_so_and_keeps_the_bundled_model(monkeypatch, tmp_path: Path):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.warns(UserWarning):
        out = model.choose_model(
            "Qwen/Qwen2.5-0.5B-Instruct", "main", dragonfarm_core.ResolvedModel.bundled()
        )
    assert out[0] == SKIP
    assert "could not be downloaded" in out[3] and "bundled model" in out[3]


def test_clicking_a_preset_row_fills_the_model_box():
    event = gr.SelectData(
        None, {"index": [2, 3], "value": "no", "row_value": ["Qwen/Qwen2.5-0.5B-Instruct", "0.5B"]}
    )
    assert model.pick_preset(event) == "Qwen/Qwen2.5-0.5B-Instruct"


def test_check_summary_is_a_markdown_list(monkeypatch, tmp_path: Path):
    facts = {
        "python": "3.11.7", "executable": "/usr/bin/python3", "libraries": {"torch": "2.13.0"},
        "device": "cpu", "device_reason": "No NVIDIA GPU or driver was found.", "fix": None,
        "gpus": [], "runs_dir": str(tmp_path), "free_disk_gb": 12.5,
        "hf_token_configured": False, "hub_reachable": False,
    }  # fmt: skip
    seen = {}

    def fake_check(runs_dir=None, verbose=True):
        seen.update(runs_dir=runs_dir, verbose=verbose)
        return facts

    monkeypatch.setattr(dragonfarm_core, "check", fake_check, raising=False)
    text, code = model.run_check(tmp_path)
    assert code.strip().endswith("dragon.check()")  # the code panel shows what was run
    assert seen == {"runs_dir": tmp_path, "verbose": False}
    assert text.startswith("- Python 3.11.7") and "- Training device: cpu." in text
    assert "not reachable" in text
