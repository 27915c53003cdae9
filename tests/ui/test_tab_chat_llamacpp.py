"""The Chat tab's llama.cpp backend with the real llama-server (built by
scripts/build_llama_cpp.py; this fails, never skips, without it): the Model tab's model (the
bundled one) exported to an f16 GGUF on the first reply, then answering greedily word for word
as the local worker (the HF path) does, through the same handler a Send click calls."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import dragonfarm_core as dragon
from dragonfarm_core import llama_cpp
from dragonfarm_core.llama_cpp import LlamaCppMissing
from dragonfarm_core.models import ResolvedModel
from ui import chat_session
from ui.tabs import chat

pytestmark = pytest.mark.slow
BUNDLED = Path(__file__).resolve().parents[2] / "assets" / "models" / "tiny-support"
VIEW = ["bot0", "bot1", "session", "message", "notice", "usage", "code", "error"]
QUESTION = "My thermostat keeps dropping off Wi-Fi."


def test_the_model_is_exported_once_and_answers_as_the_worker_does(tmp_path, monkeypatch):
    try:
        llama_cpp.find_llama_cpp().binary(llama_cpp.SERVER)
    except LlamaCppMissing as e:
        pytest.fail(f"This test needs llama.cpp: {e}")
    folder = tmp_path / "tiny-support"
    shutil.copytree(BUNDLED, folder)
    model = ResolvedModel(str(folder), str(folder), None)
    runs = tmp_path / "runs"
    runs.mkdir()
    monkeypatch.setattr(chat_session, "_LLAMACPP", {})
    widgets = ["", "run", "llamacpp", "", "", "", "", chat.OLLAMA_URL, "Be brief.", 48, 0.0,
               0.9, 0]  # fmt: skip
    try:
        steps = list(chat.send(None, QUESTION, model, *widgets, runs_dir=runs))
        end = dict(zip(VIEW, steps[-1], strict=False))
        assert end["error"] == "", end["error"]
        reply = end["bot0"]["value"][-1]["content"]
        assert len(steps) > 2  # streamed in pieces
        assert sorted(p.name for p in tmp_path.glob("*.gguf")) == ["tiny-support-f16.gguf"]
        assert f'backend = dragon.backend_llamacpp("{folder}")' in end["code"]
        dragon.worker_stop()
        worker = dragon.chat(str(folder), system="Be brief.", max_new_tokens=48, temperature=0,
                             backend=dragon.backend_local())  # fmt: skip
        assert worker.say(QUESTION) == reply
    finally:
        dragon.worker_stop()
        for backend in chat_session._LLAMACPP.values():
            backend.stop()
