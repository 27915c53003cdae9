"""The Chat tab's llama.cpp backend with the real llama-server (built by
scripts/build_llama_cpp.py; this fails, never skips, without it): a tiny real run on the bundled
model, merged and exported to an f16 GGUF inside its folder on the first reply, then answering
greedily word for word as the local worker (the HF path) does, through the same handler a Send
click calls."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.llamacpp import location as llama_cpp
from dragonfarm_core.llamacpp.location import LlamaCppMissing
from dragonfarm_core.models import ResolvedModel
from ui import chat_session
from ui.tabs import chat

pytestmark = [pytest.mark.slow, pytest.mark.gguf]  # gguf: needs the llama.cpp build
ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "assets" / "models" / "tiny-support"
VIEW = ["bot0", "bot1", "session", "message", "notice", "usage", "code", "error"]
QUESTION = "My thermostat keeps dropping off Wi-Fi."


def test_a_run_is_exported_once_inside_its_folder_and_answers_as_the_worker_does(
    tmp_path, monkeypatch
):
    try:
        llama_cpp.find_llama_cpp().binary(llama_cpp.SERVER)
    except LlamaCppMissing as e:
        pytest.fail(f"This test needs llama.cpp: {e}")
    sys.path.insert(0, str(ROOT / "tests" / "trainers"))
    from trainer_fixtures import support_conversations

    from tests.export.test_merge import train

    runs = tmp_path / "runs"
    run = train(runs / "20260101-000000-support", support_conversations(30, seed=5), BUNDLED)
    model = ResolvedModel(str(BUNDLED), str(BUNDLED), None)
    monkeypatch.setattr(chat_session, "_LLAMACPP", {})
    widgets = [str(run), "run", "llamacpp", "", "", "", "", chat.OLLAMA_URL, "Be brief.", 24,
               0.0, 0.9, 0]  # fmt: skip
    try:
        steps = list(chat.send(None, QUESTION, model, *widgets, runs_dir=runs))
        end = dict(zip(VIEW, steps[-1], strict=False))
        assert end["error"] == "", end["error"]
        reply = end["bot0"]["value"][-1]["content"]
        assert len(steps) > 2  # streamed in pieces
        assert sorted(p.name for p in run.glob("*.gguf")) == ["merged-f16.gguf"]  # in the run
        assert f'backend = dragon.backend_llamacpp("{run}")' in end["code"]
        dragon.worker_stop()
        worker = dragon.chat(str(run), system="Be brief.", max_new_tokens=24, temperature=0,
                             runs_dir=runs, backend=dragon.backend_local())  # fmt: skip
        assert worker.say(QUESTION) == reply
    finally:
        dragon.worker_stop()
        for backend in chat_session._LLAMACPP.values():
            backend.stop()
