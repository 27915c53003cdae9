"""`dragonfarm serve` on what the exports write: a run's merged folder (named after its run),
and a GGUF (decoded by llama.cpp's llama-server behind the same guarded API; without llama.cpp,
a clear refusal). The served GGUF end to end is in tests/export/test_export_e2e.py (slow)."""

from __future__ import annotations

import shutil
from pathlib import Path

import openai
import pytest
from openai import OpenAI

from dragonfarm_core.export import merge as export
from dragonfarm_core.rundir import files
from dragonfarm_core.serve import server as serve
from tests.serve.test_serve import Scripted, serve_in_thread

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "assets" / "models" / "tiny-support"


def merged_run(root: Path) -> Path:
    run_dir = root / "20260101-000000-support"
    files.write_config(run_dir, {"schema": 1, "id": run_dir.name, "method": "sft",
                                 "model": {"name": "m", "base": str(BUNDLED)}})  # fmt: skip
    dest = export.default_out_dir(run_dir)
    tmp = export.temp_dir(dest, "t")
    shutil.copytree(BUNDLED, tmp)
    return export.finish(tmp, dest)


def test_a_merged_folder_is_served_under_its_runs_id(tmp_path):
    merged = merged_run(tmp_path)
    assert serve.merged_run_name(str(merged)) == "20260101-000000-support"
    assert serve.merged_run_name(str(BUNDLED)) is None
    backend = Scripted()
    name = serve.merged_run_name(str(merged))
    server, thread, url = serve_in_thread(serve.build_api(str(merged), backend=backend, name=name))
    try:
        client = OpenAI(base_url=url, api_key="none", max_retries=0)
        assert [m.id for m in client.models.list()] == [name]
        reply = client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "Hi"}]
        )
        assert reply.choices[0].message.content
        spec = backend.calls[-1][0]
        assert Path(spec.base) == merged.resolve() and not spec.adapters  # the folder, alone
    finally:
        server.should_exit = True
        thread.join(10)


def test_a_gguf_that_is_not_there_is_refused(tmp_path, capsys):
    assert serve.main([str(tmp_path / "model.gguf")]) == 2
    assert "is not a file; pass a GGUF" in capsys.readouterr().err


def test_a_gguf_without_llama_cpp_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("LLAMA_CPP_DIR", str(tmp_path / "empty"))
    assert serve.main([str(gguf)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dragonfarm serve:") and "dragonfarm build-llama-cpp" in err


def test_base_makes_no_sense_for_a_gguf(tmp_path, capsys):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    assert serve.main([str(gguf), "--base"]) == 2
    assert "a GGUF has only its own" in capsys.readouterr().err


class GgufLike(Scripted):
    """A backend with a model of its own and no model folder here, as a GGUF's llama-server."""

    model = "m-f16"


def test_a_ggufs_context_is_checked_with_its_own_counter_before_the_backend(tmp_path):
    backend = GgufLike()
    # Ten tokens a word, as llama_tokens would ask llama-server (tests/serve/test_serve_gguf.py
    # does, against the real one).
    app = serve.build_api(str(tmp_path / "m-f16.gguf"), backend=backend, name="m",
                          context=(100, lambda m: 10 * len(m[-1]["content"].split())))  # fmt: skip
    server, thread, url = serve_in_thread(app)
    try:
        client = OpenAI(base_url=url, api_key="none", max_retries=0)
        long = [{"role": "user", "content": "word " * 20}]
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="m", messages=long)
        assert caught.value.code == "context_length_exceeded"
        assert "maximum context length is 100 tokens" in caught.value.message
        assert backend.calls == []  # refused before the backend was asked anything
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert backend.calls[-1][2].max_new_tokens == 90  # unset: what the context leaves
    finally:
        server.should_exit = True
        thread.join(10)


def test_a_llama_server_that_cannot_count_leaves_the_check_to_it():
    from dragonfarm_core.llamacpp.server import LlamaServerError

    def down():
        raise LlamaServerError("llama-server /tokenize answered 503: loading")

    assert serve.llama_tokens(down)([{"role": "user", "content": "hi"}]) is None
