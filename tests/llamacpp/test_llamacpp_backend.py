"""`backend_llamacpp`: a GGUF decoded by llama.cpp's llama-server behind the backend Protocol.

Fast: the sampler fields follow the worker's semantics (the generation config's repetition
penalty over the whole context, then temperature, top_k, top_p; greedy is the argmax after the
penalty), the stream is read piece by piece, DRAGONFARM_BACKEND=llamacpp:RUN picks it.
Slow (the bundled model exported to a real f16 GGUF, the real llama-server built by
scripts/build_llama_cpp.py; these fail, never skip, without it): greedy replies are the HF
path's (the worker's) word for word, streamed pieces make the reply, a killed server is started
again and the request answered, and a run is exported on demand once and then reused.
"""

from __future__ import annotations

import io
import json
import shutil
import signal
from pathlib import Path

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.inference import (
    Backend,
    InferenceError,
    LlamaCppBackend,
    Sampling,
    backend_llamacpp,
    backend_local,
    parse_backend,
    worker_stop,
)
from dragonfarm_core.inference.llamacpp import (
    generation_defaults,
    sampler_body,
    source_folder,
    sse_pieces,
)

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "assets" / "models" / "tiny-support"
PROMPTS = [
    "Hi",
    "My thermostat keeps dropping off Wi-Fi.",
    "I was charged twice for my order. Can you refund one of them?",
    "How do I cancel my subscription before it renews?",
]


def test_it_is_a_backend_and_the_environment_names_it(tmp_path):
    b = parse_backend(f"llamacpp:{tmp_path / 'm-f16.gguf'}")
    assert isinstance(b, LlamaCppBackend) and isinstance(b, Backend)
    assert b.name == "llamacpp" and b.model == "m-f16.gguf"
    with pytest.raises(ValueError, match="llamacpp:RUN"):
        parse_backend("llamacpp:")


def test_the_sampler_fields_follow_the_worker():
    defaults = generation_defaults(BUNDLED)  # repetition_penalty 1.1, no top_k: transformers' 50
    assert defaults == {"repeat_penalty": 1.1, "top_k": 50}
    greedy = sampler_body(Sampling(32, 0.0), defaults, ctx=4096)
    assert greedy["samplers"] == ["penalties", "top_k"] and greedy["top_k"] == 1
    assert greedy["repeat_penalty"] == 1.1 and greedy["repeat_last_n"] == 4096
    assert greedy["min_p"] == 0.0 and greedy["dry_multiplier"] == 0.0 and "seed" not in greedy
    sampled = sampler_body(Sampling(32, 0.8, 0.9, seed=5), defaults, ctx=4096)
    assert sampled["samplers"] == ["penalties", "temperature", "top_k", "top_p"]
    assert (sampled["temperature"], sampled["top_k"], sampled["top_p"]) == (0.8, 50, 0.9)
    assert sampled["seed"] == 5 and sampled["max_tokens"] == 32
    assert generation_defaults(None) == {"repeat_penalty": 1.0, "top_k": 50}


def test_a_gguf_finds_the_folder_it_was_exported_from(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert source_folder(tmp_path / "tiny-f16.gguf") == folder
    assert source_folder(tmp_path / "other-q8_0.gguf") is None


def test_the_stream_is_read_piece_by_piece():
    events = [{"choices": [{"delta": {"role": "assistant"}}]},
              {"choices": [{"delta": {"content": "Hel"}}]},
              {"choices": [{"delta": {"content": "lo"}}]}]  # fmt: skip
    raw = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    assert list(sse_pieces(io.BytesIO(raw.encode()))) == ["Hel", "lo"]
    broken = io.BytesIO(b'data: {"error": {"message": "context full"}}\n\n')
    with pytest.raises(InferenceError, match="context full"):
        list(sse_pieces(broken))


# --- against the real llama-server -------------------------------------------------------------


@pytest.fixture(scope="module")
def gguf(bundled_gguf: Path) -> Path:
    return bundled_gguf  # tests/conftest.py: made once a session


@pytest.fixture(scope="module")
def llama(gguf):
    b = backend_llamacpp(gguf, threads=2, slots=2)
    yield b
    b.stop()


@pytest.mark.slow
@pytest.mark.gguf
def test_greedy_replies_are_the_hf_paths(gguf, llama):
    worker_stop()
    try:
        hf = dragon.generate(gguf.with_name("tiny-support"), PROMPTS, max_new_tokens=48,
                             temperature=0, backend=backend_local())  # fmt: skip
    finally:
        worker_stop()
    ours = dragon.generate(gguf.with_name("tiny-support"), PROMPTS, max_new_tokens=48,
                           temperature=0, backend=llama)  # fmt: skip
    assert ours == hf


@pytest.mark.slow
@pytest.mark.gguf
def test_streamed_pieces_make_the_reply_and_seeds_repeat(llama):
    pieces: list[str] = []
    messages = [{"role": "user", "content": PROMPTS[1]}]
    reply = llama.chat(None, messages, Sampling(40, 0.0), pieces.append)
    assert len(pieces) > 1 and "".join(pieces).strip() == reply
    sampled = Sampling(40, 1.0, 0.9, seed=3)
    assert llama.chat(None, messages, sampled) == llama.chat(None, messages, sampled)


@pytest.mark.slow
@pytest.mark.gguf
def test_a_killed_server_is_started_again(llama):
    messages = [{"role": "user", "content": PROMPTS[0]}]
    first = llama.chat(None, messages, Sampling(16, 0.0))
    server = llama._server
    server.process.send_signal(signal.SIGKILL)
    server.process.wait()
    assert llama.chat(None, messages, Sampling(16, 0.0)) == first
    assert llama._server is not server and llama._server.process.poll() is None


@pytest.mark.slow
@pytest.mark.gguf
def test_a_run_is_exported_on_demand_and_then_reused(tmp_path, monkeypatch, gguf):
    from dragonfarm_core.export import gguf as gguf_export
    from dragonfarm_core.inference import llamacpp

    folder = tmp_path / "tiny-support"
    shutil.copytree(BUNDLED, folder)
    made = shutil.copy(gguf, tmp_path / "tiny-support-f16.gguf")
    shutil.copy(f"{gguf}.check.json", f"{made}.check.json")
    shutil.copystat(gguf, made)  # the check record names the file's size and time
    calls = []
    monkeypatch.setattr(gguf_export, "export_gguf", lambda *a, **k: calls.append(a))
    b = llamacpp.backend_llamacpp(folder)
    assert b.gguf() == Path(made).resolve() and calls == []  # checked: reused, not exported


def test_serve_llamacpp_refuses_base_and_a_folder_that_is_no_model(tmp_path, capsys):
    from dragonfarm_core.serve import server as serve

    assert serve.main([str(BUNDLED), "--llamacpp", "--base"]) == 2
    assert "--base needs the local worker" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert serve.main([str(tmp_path / "empty"), "--llamacpp"]) == 2
    assert "neither a run nor a model folder" in capsys.readouterr().err
