"""GGUF export through llama.cpp and the template round-trip check.

Fast: a missing or unusable llama.cpp is named with the way to get one (before any job starts);
the converter's staged input carries what transformers 5 keeps only in tokenizer.json; the
check names the first differing token and applies the quantized tolerance; a failing converter
fails the export and leaves no file (the build itself: tests/llamacpp/test_llama_cpp_build.py). Slow, on
the bundled model with the real llama.cpp (built by `dragonfarm build-llama-cpp` or
scripts/build_llama_cpp.py; these tests FAIL, never skip, without it):
f16 and q8_0 exports pass the round trip; a template changed after export and a GGUF the
converter wrote from the raw folder are both caught."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dragonfarm_core as dragon
from dragonfarm_core import environment
from dragonfarm_core.cli import commands as cli
from dragonfarm_core.export import gguf, gguf_files
from dragonfarm_core.export import merge as export
from dragonfarm_core.export.gguf import GGUFError, LlamaCppMissing
from dragonfarm_core.llamacpp import location as llama_cpp
from dragonfarm_core.rundir import files, location

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from llama_cpp_fakes import fake_llama_cpp  # noqa: E402


@pytest.fixture
def no_llama_cpp(tmp_path, monkeypatch) -> Path:
    """No LLAMA_CPP_DIR, and an empty build cache."""
    monkeypatch.delenv(llama_cpp.LLAMA_CPP_DIR_ENV, raising=False)
    monkeypatch.setenv(llama_cpp.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def runs(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(location.ENV_VAR, str(tmp_path / "runs"))
    monkeypatch.setattr(location, "_configured", None)
    (tmp_path / "runs").mkdir()
    return tmp_path / "runs"


def model_folder(path: Path) -> Path:
    """A model folder as far as the app side looks (nothing loads it)."""
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"model_type": "llama"}')
    (path / "model.safetensors").write_bytes(b"not weights")
    return path


# --- finding llama.cpp -------------------------------------------------------------------------


def test_a_missing_llama_cpp_says_how_to_get_one_and_starts_nothing(no_llama_cpp, runs, tmp_path):
    with pytest.raises(LlamaCppMissing) as raised:
        dragon.export_gguf(model_folder(tmp_path / "m"))
    message = str(raised.value)
    assert "No llama.cpp found" in message and "LLAMA_CPP_DIR is not set" in message
    # A pip install has no scripts/: the message names the product's own ways to build it.
    assert "dragonfarm build-llama-cpp" in message and "Build llama.cpp" in message
    assert "scripts/" not in message and str(no_llama_cpp) in message
    assert not (runs / files.JOBS_DIR).exists()  # refused before any job started
    assert not list(tmp_path.glob("*.gguf"))
    facts = llama_cpp.describe()
    assert facts["available"] is False
    assert "not available" in environment._llama_cpp_line(facts)


def test_llama_cpp_dir_must_be_a_built_llama_cpp_tree(no_llama_cpp, monkeypatch, tmp_path):
    monkeypatch.setenv(llama_cpp.LLAMA_CPP_DIR_ENV, str(tmp_path))
    with pytest.raises(LlamaCppMissing, match=r"\(from LLAMA_CPP_DIR\) is not a llama.cpp source"):
        llama_cpp.find_llama_cpp()
    tree = fake_llama_cpp(tmp_path / "llama.cpp")
    (tree / "build" / "bin" / llama_cpp.SERVER).unlink()
    tools = llama_cpp.find_llama_cpp(tree)  # the argument before the variable
    assert tools.found_by == "llama_cpp_dir" and tools.quantize is not None
    with pytest.raises(LlamaCppMissing, match="has no llama-server binary"):
        gguf.usable_llama_cpp(tree, "f16")
    monkeypatch.setenv(llama_cpp.LLAMA_CPP_DIR_ENV, str(tree))
    assert llama_cpp.describe()["available"] is False


def test_a_cache_built_for_another_cpu_is_not_used(no_llama_cpp, monkeypatch):
    fake_llama_cpp(llama_cpp.cache_dir())
    with pytest.raises(LlamaCppMissing, match="marker is missing"):
        llama_cpp.find_llama_cpp()
    marker = {"native": True, "cpu_flags": ["avx2", "avx512f"], "llama_cpp_python": "0.3.36"}
    (llama_cpp.cache_dir() / llama_cpp.BUILT_MARKER).write_text(json.dumps(marker))
    with pytest.raises(LlamaCppMissing, match=r"earlier build script \(revision 1, now 2\)"):
        llama_cpp.find_llama_cpp()  # built with the AMX kernels that crashed on q8_0
    marker["build_revision"] = llama_cpp.BUILD_REVISION
    (llama_cpp.cache_dir() / llama_cpp.BUILT_MARKER).write_text(json.dumps(marker))
    monkeypatch.setattr(llama_cpp, "cpu_flags", lambda: frozenset({"avx2"}))
    with pytest.raises(LlamaCppMissing, match="natively for a CPU with avx512f"):
        llama_cpp.find_llama_cpp()
    monkeypatch.setattr(llama_cpp, "cpu_flags", lambda: frozenset({"avx2", "avx512f"}))
    tools = llama_cpp.find_llama_cpp()
    assert tools.found_by == "the build cache" and tools.root == llama_cpp.cache_dir().resolve()
    line = environment._llama_cpp_line(llama_cpp.describe())
    assert line.startswith(f"llama.cpp: {tools.root} (llama-cpp-python 0.3.36")


# --- what the app side refuses -----------------------------------------------------------------


def test_unknown_types_and_folders_that_are_not_models_are_refused(tmp_path):
    with pytest.raises(GGUFError, match=r"Unknown GGUF type 'q9'.*q4_k_m"):
        dragon.export_gguf(tmp_path, quant="q9")
    with pytest.raises(GGUFError, match="neither a run nor a model folder"):
        dragon.export_gguf(tmp_path)
    assert gguf.default_out_file(tmp_path / "m", "F16") == tmp_path / "m-f16.gguf"
    assert gguf_files.agree_tokens("f16", 32) == 32 and gguf_files.agree_tokens("q8_0", 32) == 16
    assert gguf_files.agree_tokens("q2_k", 32) == 1


def test_a_run_that_cannot_be_merged_is_refused_by_the_cli(tmp_path, capsys):
    from tests.export.test_merge import fake_run

    run_dir = fake_run(tmp_path, state="failed")
    assert cli.main(["export-gguf", str(run_dir)]) == 1
    assert "has not succeeded (it is failed)" in capsys.readouterr().err
    unfinished = model_folder(export.default_out_dir(run_dir))  # no COMPLETE marker
    with pytest.raises(GGUFError, match="merge that did not finish"):
        dragon.export_gguf(unfinished)


def test_a_record_for_an_earlier_file_of_that_name_is_not_read(tmp_path):
    path = tmp_path / "m-f16.gguf"
    path.write_bytes(b"GGUF one")
    info = path.stat()
    record = {"passed": True, "size_bytes": info.st_size, "mtime_ns": info.st_mtime_ns}
    files.write_json(gguf_files.check_path(path), record)
    assert gguf.read_check(path) == record
    path.write_bytes(b"GGUF two, longer")
    assert gguf.read_check(path) is None


def test_a_failing_converter_fails_the_export_and_leaves_no_file(no_llama_cpp, runs, tmp_path):
    tree = fake_llama_cpp(
        tmp_path / "llama.cpp",
        "import sys\nprint('ERROR: Model MysteryForCausalLM is not supported')\nsys.exit(1)\n",
    )
    merged = model_folder(tmp_path / "m")
    with pytest.raises(GGUFError) as raised:
        dragon.export_gguf(merged, quant="f16", llama_cpp_dir=tree, timeout=120)
    message = str(raised.value)
    assert "failed (error): RuntimeError: convert_hf_to_gguf.py exited with status 1" in message
    assert "MysteryForCausalLM is not supported" in message  # the converter's own words
    assert not list(tmp_path.glob("*.gguf")) and not list(tmp_path.glob(".tmp-*"))  # nor .stage
    [job] = files.job_dirs(runs, gguf.JOB_KIND)  # a folder that is no run's: <runs>/jobs/
    assert files.read_status(job)["state"] == "failed"


def test_what_a_killed_export_left_is_removed_by_the_next(tmp_path):
    from dragonfarm_core.trainers.gguf_run import remove_leftovers

    out = tmp_path / "m-f16.gguf"
    dead = 2**22 + 12345  # above the kernel's default pid_max: no such process
    (tmp_path / f".tmp-m-f16.gguf-{dead}").write_bytes(b"half a GGUF")
    (tmp_path / f".tmp-m-f16.gguf-{dead}.stage" / "model").mkdir(parents=True)
    running = tmp_path / f".tmp-m-f16.gguf-{os.getppid()}"  # an export still in progress
    running.write_bytes(b"being written")
    other = tmp_path / f".tmp-other.gguf-{dead}"
    other.write_bytes(b"another file's")
    remove_leftovers(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([running.name, other.name])


# --- the converter's input and the verdict -------------------------------------------------------


def test_the_converter_gets_the_tokens_and_template_transformers_uses(tmp_path):
    from dragonfarm_core.trainers.gguf_convert import stage

    merged = model_folder(tmp_path / "merged")
    added = [{"id": 4, "content": "<|im_start|>", "special": True, "normalized": False}]
    post = {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A"}}], "pair": []}
    files.write_json(merged / "tokenizer.json", {"added_tokens": added, "post_processor": post})
    config = {"eos_token": "<|im_end|>", "chat_template": "stale {{ messages }}"}
    files.write_json(merged / "tokenizer_config.json", config)
    (merged / "chat_template.jinja").write_text("current {{ messages }}")

    staged = stage(merged, tmp_path / "staged")
    got = files.read_json(staged / "tokenizer_config.json")
    assert got["added_tokens_decoder"] == {
        "4": {"content": "<|im_start|>", "special": True, "normalized": False}
    }
    assert got["add_bos_token"] is False and got["add_eos_token"] is False
    assert "chat_template" not in got  # the converter reads chat_template.jinja, as HF does
    assert (staged / "chat_template.jinja").resolve() == (merged / "chat_template.jinja")
    assert files.read_json(merged / "tokenizer_config.json") == config  # the folder is unchanged
    # What the folder says itself wins.
    files.write_json(merged / "tokenizer_config.json", {**config, "add_bos_token": True})
    got = files.read_json(stage(merged, tmp_path / "again") / "tokenizer_config.json")
    assert got["add_bos_token"] is True


def test_the_verdict_names_the_first_differing_token_on_both_sides():
    from dragonfarm_core.trainers.gguf_check import judge

    def case(hf_reply, gguf_reply, gguf_prompt=(1, 2)):
        return {"hf_prompt": [1, 2], "gguf_prompt": list(gguf_prompt),
                "hf_reply": hf_reply, "gguf_reply": gguf_reply}  # fmt: skip

    def hf(t):
        return f"hf{t}"

    def gg(t):
        return f"gg{t}"

    exact = [case([5, 6, 7], [5, 6, 7]), case([5, 6, 7], [5, 9, 7])]
    assert judge(exact, 32, hf, gg) == {
        "prompt": 1, "in": "reply", "position": 1,
        "hf": {"id": 6, "text": "hf6"}, "gguf": {"id": 9, "text": "gg9"},
    }  # fmt: skip
    assert exact[1]["reply_agree"] == 1 and exact[0]["reply_ok"] is True
    # Quantized: agreeing on the first `need` tokens is enough; a reply that ended sooner must
    # be matched whole.
    assert judge([case([5, 6, 7], [5, 6, 8])], 2, hf, gg) is None
    assert judge([case([5], [5, 6])], 2, hf, gg)["gguf"] == {"id": 6, "text": "gg6"}
    # A prompt difference (the template) is reported before any reply difference.
    problem = judge([case([5, 6], [5, 9]), case([5], [5], gguf_prompt=(1, 3))], 32, hf, gg)
    assert problem["in"] == "prompt" and problem["prompt"] == 1 and problem["position"] == 1
    assert problem["hf"] == {"id": 2, "text": "hf2"} and problem["gguf"]["id"] == 3
    assert gguf_files.difference_text({"first_difference": problem}).endswith(
        "in the prompt tokens (the chat template) of check prompt 1, token 1: transformers 2 "
        "'hf2', llama.cpp 3 'gg3'."
    )


# --- real exports on the bundled model (slow) -------------------------------------------------


@pytest.fixture(scope="module")
def tools():
    """The real llama.cpp. Missing, it fails the slow tests: scripts/test.sh builds it."""
    try:
        found = llama_cpp.find_llama_cpp()
        found.binary(llama_cpp.SERVER)
        found.binary(llama_cpp.QUANTIZE)
    except LlamaCppMissing as e:
        pytest.fail(f"The GGUF tests need llama.cpp: {e}")
    return found


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny real run on the bundled model, not merged yet."""
    sys.path.insert(0, str(ROOT / "tests" / "trainers"))
    from trainer_fixtures import build_tiny_model, support_conversations

    from tests.export.test_merge import BUNDLED, train

    root = tmp_path_factory.mktemp("gguf")
    base = BUNDLED if (BUNDLED / "config.json").is_file() else build_tiny_model(root / "m")
    return train(root / "run", support_conversations(30, seed=5), base)


@pytest.fixture(scope="module")
def f16(run_dir, tools):
    """The run exported to f16: merged first, by the export's own job."""
    return dragon.export_gguf(run_dir, quant="f16")


@pytest.mark.slow
@pytest.mark.gguf
def test_f16_and_q8_0_exports_pass_the_round_trip(run_dir, f16, tools):
    merged = export.default_out_dir(run_dir).resolve()
    assert f16 == run_dir.resolve() / "merged-f16.gguf" and f16.read_bytes()[:4] == b"GGUF"
    assert export.is_complete(merged) and export.merge_check(merged)["identical"]
    record = gguf.read_check(f16)
    assert record["passed"] is True and record["quant"] == "f16"
    assert record["tolerance"] == {"exact": True, "agree_tokens": 32}
    assert record["templates_identical"] and record["first_difference"] is None
    assert record["prompts"] == 6 and record["split"] == "eval"  # 4 held-out + 2 fixed
    assert record["replies_identical"] == 6
    assert all(c["gguf_reply"] and c["hf_text"] == c["gguf_text"] for c in record["cases"])
    assert record["embedded_template"] == (merged / "chat_template.jinja").read_text()

    q8 = dragon.export_gguf(merged, quant="q8_0")  # from the folder: still the run's job
    assert q8 == run_dir.resolve() / "merged-q8_0.gguf"
    assert q8.stat().st_size < f16.stat().st_size
    record = gguf.read_check(q8)
    assert record["passed"] is True and record["quant"] == "q8_0"
    assert record["templates_identical"] and record["min_agree_tokens"] >= 16
    print(f"\nq8_0: {gguf.describe_check(record)}")
    assert len(files.job_dirs(run_dir, gguf.JOB_KIND)) == 2
    assert not [p for p in run_dir.iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.slow
@pytest.mark.gguf
def test_a_template_changed_after_export_is_caught(run_dir, f16, tools, tmp_path):
    changed = tmp_path / "changed"
    shutil.copytree(export.default_out_dir(run_dir), changed)
    template = changed / "chat_template.jinja"
    template.write_text(template.read_text().replace("message['role'] + '\\n'",
                                                     "message['role'] + ':\\n'"))  # fmt: skip
    record = dragon.check_export(changed, gguf=f16)
    assert record["passed"] is False and record["templates_identical"] is False
    difference = record["first_difference"]
    assert difference["in"] == "prompt" and difference["position"] == 2  # after <|im_start|>role
    assert difference["hf"]["text"] == ":" and difference["gguf"]["text"] == "\n"
    assert difference["hf"]["id"] != difference["gguf"]["id"]
    assert gguf.read_check(f16)["passed"] is False  # the latest verdict is beside the file
    assert dragon.check_export(run_dir, gguf=f16)["passed"] is True  # the run's own: passes


@pytest.mark.slow
@pytest.mark.gguf
def test_a_gguf_converted_from_the_raw_folder_is_caught(run_dir, f16, tools, tmp_path):
    """llama.cpp's converter on the merged folder as transformers 5 saves it, without the
    staged tokenizer_config.json: the GGUF adds a BOS the model never saw (and would split
    <|im_start|>); the check names it."""
    raw = tmp_path / "raw-f16.gguf"
    merged = export.default_out_dir(run_dir)
    done = subprocess.run(
        [sys.executable, str(tools.converter), str(merged), "--outfile", str(raw),
         "--outtype", "f16"], env=tools.converter_env(), capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    record = dragon.check_export(run_dir, gguf=raw)
    assert record["passed"] is False
    difference = record["first_difference"]
    assert difference["in"] == "prompt" and difference["position"] == 0
    assert difference["hf"] == {"id": 4, "text": "<|im_start|>"}
    assert difference["gguf"]["id"] == 1  # <s>
    assert os.path.isfile(gguf_files.check_path(raw))
