"""Slow, on the bundled model: a trained run taken all the way out. serve_ollama merges it,
exports and round-trip checks the GGUF with llama.cpp, proves the Ollama template and registers
it with the local Ollama-API server; publish uploads the merged model and its GGUF to the local
Hub server; `dragonfarm serve`'s GGUF path decodes the file with llama-server behind the guarded
API. Needs llama.cpp (scripts/build_llama_cpp.py); fails without it, like tests/export/test_gguf.py:
CI builds it, so a missing llama.cpp is a broken setup, not a reason to pass."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.export import gguf
from dragonfarm_core.export import merge as export
from dragonfarm_core.export.ollama import template as ot
from dragonfarm_core.inference import Sampling
from dragonfarm_core.llamacpp.location import LlamaCppMissing, find_llama_cpp
from dragonfarm_core.serve import server as serve

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "assets" / "models" / "tiny-support"
sys.path.insert(0, str(ROOT / "tests" / "inference"))
sys.path.insert(0, str(ROOT / "tests" / "trainers"))

pytestmark = [pytest.mark.slow, pytest.mark.gguf]  # gguf: needs the llama.cpp build


def llama_cpp_missing() -> str | None:
    try:
        find_llama_cpp().binary("llama-server")
    except LlamaCppMissing as e:
        return str(e).splitlines()[0]
    return None


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    if (why := llama_cpp_missing()) is not None:
        pytest.fail(f"llama.cpp is not available: {why} Run: python scripts/build_llama_cpp.py")
    from trainer_fixtures import support_conversations

    from tests.export.test_merge import train

    root = tmp_path_factory.mktemp("export-e2e")
    return train(root / "20260101-000000-support", support_conversations(30, seed=5), BUNDLED)


def test_a_trained_run_is_served_by_ollama_published_and_served_from_its_gguf(trained):
    from hub_fakes import FakeHub
    from inference_fakes import FakeOllama
    from openai import OpenAI

    from tests.serve.test_serve import serve_in_thread

    run_dir = trained
    with FakeOllama("other") as ollama:
        backend = dragon.serve_ollama(run_dir, name="support-e2e", url=ollama.url)
        reply = backend.chat(None, [{"role": "user", "content": "Hi"}], Sampling())
    assert reply
    # Merged, then exported by llama.cpp with its own round-trip check passed.
    merged = export.merged_model(dragon.open_run(run_dir))
    assert merged is not None and export.merge_check(merged)["identical"] is True
    path = gguf.default_out_file(merged, "q8_0")
    assert gguf.read_check(path)["passed"] is True
    # The Ollama template: the bundled model's ChatML, proven on the fixed and held-out prompts.
    check = json.loads((run_dir / "ollama" / "template_check.json").read_text())
    assert check["identical"] is True and check["checked"] == 4 + 4
    created = ollama.created["support-e2e"]
    assert created["template"] == ot.CHATML_GO and created["files"] == {
        path.name: next(iter(ollama.blobs))
    }
    assert ollama.blobs[created["files"][path.name]] == path.read_bytes()
    assert "<|im_end|>" in created["parameters"]["stop"]

    with FakeHub() as hub:
        url = dragon.publish(run_dir, "alice/support-e2e", token="hf_good", endpoint=hub.url)
    stored = hub.repos["alice/support-e2e"]
    assert url.endswith("/alice/support-e2e")
    assert stored["model.safetensors"] == (merged / "model.safetensors").read_bytes()
    assert stored[path.name] == path.read_bytes() and "loss.png" in stored
    card = stored["README.md"].decode()
    assert "llama-cli -hf alice/support-e2e" in card and "equal those of base + adapter" in card

    server, llama_backend, name = serve.gguf_backend(str(path), None, 2048)
    api, thread, base_url = serve_in_thread(
        serve.build_api(str(path), backend=llama_backend, name=name)
    )
    try:
        client = OpenAI(base_url=base_url, api_key="none", max_retries=0)
        answer = client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "My order arrived damaged."}],
            max_tokens=16, temperature=0,
        )  # fmt: skip
        assert name == "merged-q8_0" and answer.choices[0].message.content.strip()
    finally:
        api.should_exit = True
        thread.join(10)
        server.stop()
