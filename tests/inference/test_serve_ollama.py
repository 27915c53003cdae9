"""serve_ollama against a local server that speaks Ollama's blob, create and chat API, driven
through the official `ollama` client: what is uploaded and created, the Modelfile and the
template check written in the run, the backend it returns, and the refusals.

The run here has a complete merged folder (the bundled model's config, tokenizer, chat template
and generation config; no weights) and a stand-in GGUF file, so no merge or llama.cpp runs;
the slow test at the end exports the real bundled model.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from inference_fakes import REPLY, FakeOllama, free_port

import dragonfarm_core as dragon
from dragonfarm_core.export import merge as export
from dragonfarm_core.export.ollama import template as ot
from dragonfarm_core.inference import Sampling
from dragonfarm_core.rundir import files
from dragonfarm_core.serve import ollama as oe

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "assets" / "models" / "tiny-support"
SMALL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "chat_template.jinja")  # fmt: skip
EVAL_ROWS = [
    {"messages": [{"role": "user", "content": "The app logs me out every hour."},
                  {"role": "assistant", "content": "Update the app, then sign in again."}]},
]  # fmt: skip


def merged_run(root: Path, template: str | None = None) -> Path:
    """A succeeded run whose merged/ folder is complete (its marker written by export.finish)."""
    run_dir = root / "20260101-000000-support"
    files.write_config(run_dir, {"schema": 1, "id": run_dir.name, "name": "support",
                                 "method": "sft", "model": {"name": "m", "base": str(BUNDLED)}})  # fmt: skip
    files.write_status(run_dir, {"state": "succeeded"})
    (run_dir / "data").mkdir()
    files.write_jsonl(run_dir / files.EVAL_DATA, EVAL_ROWS)
    dest = export.default_out_dir(run_dir)
    tmp = export.temp_dir(dest, "test")
    tmp.mkdir(parents=True)
    for name in SMALL_FILES:
        shutil.copyfile(BUNDLED / name, tmp / name)
    if template is not None:
        (tmp / "chat_template.jinja").write_text(template, encoding="utf-8")
    export.finish(tmp, dest)
    return run_dir


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return merged_run(tmp_path)


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    path = tmp_path / "support-q8_0.gguf"
    path.write_bytes(b"GGUF" + os.urandom(4096))
    return path


def test_the_gguf_is_uploaded_as_a_blob_and_the_model_created_from_it(run_dir, gguf):
    with FakeOllama("other") as server:
        backend = dragon.serve_ollama(run_dir, name="support:v1", url=server.url, gguf=gguf)
        reply = backend.chat(None, [{"role": "user", "content": "Hi"}], Sampling())
    digest = "sha256:" + hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert server.blobs == {digest: gguf.read_bytes()}
    upload = next(r for r in server.requests if r["path"].startswith("/api/blobs/"))
    assert upload["path"] == f"/api/blobs/{digest}" and upload["method"] == "POST"
    created = server.created["support:v1"]
    assert created["files"] == {gguf.name: digest}
    assert created["template"] == ot.CHATML_GO and "system" not in created
    assert created["parameters"]["stop"] == ["<|im_start|>", "<|im_end|>"]
    assert created["parameters"]["temperature"] == 0.7
    # The backend talks to the model it registered.
    assert repr(backend) == f"backend_ollama(model='support:v1', url='{server.url}')"
    assert reply == REPLY and server.requests[-1]["body"]["model"] == "support:v1"


def test_the_modelfile_and_the_template_check_are_written_in_the_run(run_dir, gguf):
    with FakeOllama("other") as server:
        dragon.serve_ollama(run_dir, url=server.url, gguf=gguf, log=lambda line: None)
    text = (run_dir / "ollama" / "Modelfile").read_text()
    assert f"FROM {gguf}" in text  # outside the run: its absolute path
    assert f'TEMPLATE """{ot.CHATML_GO}"""' in text and 'PARAMETER stop "<|im_end|>"' in text
    check = json.loads((run_dir / "ollama" / "template_check.json").read_text())
    # The four fixed conversations and the run's one held-out prompt, all identical.
    assert check["identical"] is True and check["checked"] == 5 and check["family"] == "chatml"
    assert server.created[oe.default_name(dragon.open_run(run_dir))]  # named after the run
    result = oe.result_of(dragon.open_run(run_dir), "n", server.url)
    assert result["gguf"] == str(gguf) and result["template_check"]["identical"] is True


def test_a_default_system_prompt_goes_to_ollama_as_the_system(tmp_path, gguf):
    smollm = (ROOT / "tests" / "export_templates" / "smollm2.jinja").read_text()
    run_dir = merged_run(tmp_path, template=smollm)
    with FakeOllama("other") as server:
        dragon.serve_ollama(run_dir, name="smol", url=server.url, gguf=gguf, log=lambda s: None)
    assert server.created["smol"]["system"].startswith(
        "You are a helpful AI assistant named SmolLM"
    )


def test_ollama_not_running_is_a_clear_error_and_the_modelfile_is_still_there(run_dir, gguf):
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(oe.OllamaExportError, match=f"Ollama is not running at {url}: start it"):
        dragon.serve_ollama(run_dir, url=url, gguf=gguf, log=lambda s: None)
    assert (run_dir / "ollama" / "Modelfile").is_file()


def test_ollama_refusing_the_create_is_quoted(run_dir, gguf):
    with (
        FakeOllama("other", mode="create-500") as server,
        pytest.raises(
            oe.OllamaExportError,
            match=r"refused to create 'm' \(HTTP 500\): unsupported architecture",
        ),
    ):
        dragon.serve_ollama(run_dir, name="m", url=server.url, gguf=gguf, log=lambda s: None)


def test_an_unknown_template_family_is_refused_before_anything_is_uploaded(tmp_path, gguf):
    mistral = "{% for m in messages %}{{ '[INST] ' + m['content'] + ' [/INST]' }}{% endfor %}"
    run_dir = merged_run(tmp_path, template=mistral)
    with FakeOllama("other") as server:
        with pytest.raises(oe.UnknownTemplateFamily, match="Mistral.*template='embedded'"):
            dragon.serve_ollama(run_dir, url=server.url, gguf=gguf, log=lambda s: None)
        assert server.requests == [] and server.blobs == {}
        # As offered: the GGUF's own template, no TEMPLATE sent, nothing checked.
        dragon.serve_ollama(run_dir, name="m", url=server.url, gguf=gguf, template="embedded",
                            log=lambda s: None)  # fmt: skip
    assert "template" not in server.created["m"]
    assert "TEMPLATE" not in (run_dir / "ollama" / "Modelfile").read_text()


def test_a_mismatching_template_of_your_own_is_registered_with_a_warning(run_dir, gguf):
    lines: list[str] = []
    own = ot.CHATML_GO.replace("{{ .Role }}\n", "{{ .Role }}: ")
    with FakeOllama("other") as server:
        dragon.serve_ollama(run_dir, name="mine", url=server.url, gguf=gguf, template=own,
                            log=lines.append)  # fmt: skip
    assert server.created["mine"]["template"] == own
    assert any(line.startswith("warning: The custom template") for line in lines)
    assert (
        json.loads((run_dir / "ollama" / "template_check.json").read_text())["identical"] is False
    )


def test_a_run_that_has_not_succeeded_is_refused_by_the_merge(tmp_path, gguf):
    run_dir = merged_run(tmp_path)
    shutil.rmtree(run_dir / "merged")
    files.write_status(run_dir, {"state": "failed"})
    with pytest.raises(export.MergeError, match="has not succeeded"):
        dragon.serve_ollama(run_dir, gguf=gguf, log=lambda s: None)


def test_a_bad_name_is_refused():
    with pytest.raises(ValueError, match="not an Ollama model name"):
        oe._check_name("my model!")


def test_the_job_registers_the_model_and_returns_the_result(run_dir, gguf):
    with FakeOllama("other") as server:
        pending = oe.start_serve_ollama(run_dir, name="job-model", url=server.url, gguf=gguf)
        result = pending.wait(timeout=120)
    assert result["name"] == "job-model" and result["gguf"] == str(gguf)
    assert result["template_check"]["identical"] is True
    assert "job-model" in server.created
    assert any("registered 'job-model'" in line for line in pending.logs(50))


def test_the_gguf_exported_earlier_is_registered_without_exporting_again(run_dir, monkeypatch):
    from dragonfarm_core.export import gguf as gguf_export

    exported = gguf_export.default_out_file(
        run_dir / "merged", "q4_k_m"
    )  # <run>/merged-q4_k_m.gguf
    exported.write_bytes(b"GGUF" + b"\1" * 512)
    monkeypatch.setattr(gguf_export, "export_gguf", lambda *a, **k: pytest.fail("exported again"))
    lines: list[str] = []
    with FakeOllama("other") as server:
        dragon.serve_ollama(run_dir, name="q4", quantize="Q4_K_M", url=server.url, log=lines.append)
    assert server.created["q4"]["files"] == {exported.name: next(iter(server.blobs))}
    assert f"using the GGUF exported earlier: {exported}" in lines
    assert "FROM ../merged-q4_k_m.gguf" in (run_dir / "ollama" / "Modelfile").read_text()
