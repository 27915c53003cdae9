"""Export tab handlers: succeeded runs to pick, what a run's exports wrote (files, sizes, the
checks' verdicts), and each step started as a background job, watched, cancelled: a merge (a
stand-in job that writes a complete merged folder), a publish against the local Hub server
(tests/hub_fakes.py) with the token typed on the page, which leaves the page and is written
nowhere.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import gradio as gr
import pytest

from dragonfarm_core.export import merge as export
from dragonfarm_core.llamacpp import location as llama_cpp
from dragonfarm_core.rundir import files
from ui import llama_cpp_panel
from ui.tabs import export as tab

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
from hub_fakes import FakeHub  # noqa: E402
from llama_cpp_fakes import complete_cache  # noqa: E402

sys.path.insert(0, str(TESTS / "inference"))
from inference_fakes import FakeOllama  # noqa: E402

BUNDLED = TESTS.parent / "assets" / "models" / "tiny-support"
NAMES = ["status", "error", "log", "files", "checks", "code", "stop", "merge", "gguf", "ollama",
         "publish", "token", "timer", "watching"]  # fmt: skip
SKIP = gr.skip()
CANARY = "hf_pageCanary0Zq9NeverStoreMe"
# A merge job stand-in: waits `steps` x 0.05 s (cancellable), then writes a complete merge.
FAKE_MERGE = """
import sys, time
from pathlib import Path
from dragonfarm_core.export import merge as export
from dragonfarm_core.rundir import files, jobs
job_dir, out, steps = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
def work():
    for i in range(steps):
        time.sleep(0.05)
        print(f"step {i}", flush=True)
    tmp = export.temp_dir(out, "fake")
    tmp.mkdir(parents=True)
    (tmp / "model.safetensors").write_bytes(b"0" * 3000)
    files.write_json(tmp / export.CHECK_FILE, {"identical": True, "prompts": 4, "split": "eval",
                                               "first_difference": None})
    export.finish(tmp, out)
sys.exit(jobs.run_job(job_dir, work))
"""


def outputs(out: tuple) -> dict:
    return dict(zip(NAMES, out, strict=True))


def succeeded_run(runs_dir: Path, name: str = "support", state: str = "succeeded") -> Path:
    run_dir = runs_dir / f"20260101-00000{len(list(runs_dir.iterdir()))}-{name}"
    files.write_config(run_dir, {"schema": 1, "id": run_dir.name, "name": name, "method": "sft",
                                 "model": {"name": "dragonfarm/tiny-support", "base": str(BUNDLED)},
                                 "data": {"n_train": 4, "n_eval": 1}})  # fmt: skip
    files.write_status(run_dir, {"state": state})
    files.adapter_dir(run_dir).mkdir()
    (files.adapter_dir(run_dir) / "adapter_config.json").write_text("{}")
    return run_dir


def merged(run_dir: Path) -> Path:
    dest = export.default_out_dir(run_dir)
    tmp = export.temp_dir(dest, "t")
    tmp.mkdir(parents=True)
    for name in ("config.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copyfile(BUNDLED / name, tmp / name)
    (tmp / "model.safetensors").write_bytes(b"1" * 2_500_000)
    files.write_json(tmp / export.CHECK_FILE, {"identical": True, "prompts": 4, "split": "eval",
                                               "first_difference": None})  # fmt: skip
    return export.finish(tmp, dest)


@pytest.fixture
def fake_merge(monkeypatch: pytest.MonkeyPatch):
    def use(steps: int) -> None:
        def command(run_dir: Path, out_dir: Path, job_dir: Path) -> list[str]:
            return [sys.executable, "-c", FAKE_MERGE, str(job_dir), str(out_dir), str(steps)]

        monkeypatch.setattr(export, "merge_command", command)

    return use


def watch_until(shown: dict, done, timeout: float = 60) -> dict:
    end, watching = time.monotonic() + timeout, shown["watching"]
    while not done(shown):
        assert time.monotonic() < end, f"still {shown['status']!r} after {timeout} s"
        time.sleep(0.1)
        out = outputs(tab.tick(watching))
        if out["watching"] != SKIP:
            shown, watching = out, out["watching"]
    return shown


def start(step: str, run_dir: Path | str | None, runs_dir: Path, **given) -> dict:
    values = {"quant": "q8_0", "name": "", "url": tab.OLLAMA_URL, "repo": "", "what": "merged",
              "private": False, "token": ""} | given  # fmt: skip
    return outputs(tab.start(step, str(run_dir) if run_dir else None, *values.values(),
                             runs_dir=runs_dir))  # fmt: skip


def test_only_succeeded_runs_are_listed(runs_dir: Path):
    done = succeeded_run(runs_dir)
    succeeded_run(runs_dir, "broken", state="failed")
    assert tab.run_choices(runs_dir) == [(f"{done.name} (sft)", str(done))]
    assert tab.select(runs_dir, str(done))["value"] == str(done)


def test_a_picked_run_shows_its_files_with_sizes_the_checks_and_the_code(runs_dir: Path):
    run_dir = succeeded_run(runs_dir)
    out = outputs(tab.show(str(run_dir), None, runs_dir=runs_dir))
    assert "Nothing exported yet" in out["checks"] and out["files"]["visible"] is False
    merged(run_dir)
    (run_dir / "ollama").mkdir()
    (run_dir / "ollama" / "Modelfile").write_text("FROM x.gguf\n")
    files.write_json(run_dir / "ollama" / "template_check.json",
                     {"identical": False, "family": "chatml", "checked": 5,
                      "first_difference": {"conversation": 2, "source": "fixed",
                                           "roles": ["user"], "char": 3, "expected": "a",
                                           "ollama": "b", "token": {"position": 7,
                                           "expected": {"id": 16, "text": "\n"},
                                           "ollama": {"id": 9, "text": " "}}}})  # fmt: skip
    out = outputs(tab.show(str(run_dir), None, runs_dir=runs_dir))
    table = out["files"]["value"]
    rows = dict(zip(table["file"], table["size"], strict=True))
    assert rows["merged/model.safetensors"] == "2.5 MB" and rows["ollama/Modelfile"] == "12 B"
    assert "merged/COMPLETE" in rows and out["files"]["visible"] is True
    checks = out["checks"]
    assert "| merge: merged = base + adapter | ✅ pass | 4 eval prompts" in checks
    assert "| Ollama template = HF chat template | ❌ fail |" in checks
    assert "token 7: the model's template has '\\n' (id 16), Ollama's ' ' (id 9)" in checks
    assert "path = dragon.merge(run)" in out["code"] and str(run_dir) in out["code"]
    assert out["merge"]["interactive"] is True and out["stop"]["interactive"] is False


def test_torn_check_and_registration_files_show_as_missing_not_as_an_error(runs_dir: Path):
    """A writer killed mid-write leaves a torn merge check, template check, registration or
    publish result: the page lists the files and shows no check for it, and raises nothing."""
    run_dir = succeeded_run(runs_dir)
    folder = merged(run_dir)
    (folder / export.CHECK_FILE).write_text('{"identical": tr')
    (run_dir / "ollama").mkdir()
    (run_dir / "ollama" / "template_check.json").write_text("[1, 2, 3]")
    (run_dir / "ollama" / "registered.json").write_text('{"name": "bot", "url"')
    publish = files.new_job_dir(run_dir, "publish")
    files.write_status(publish, {"state": "succeeded", "kind": "publish"})
    (publish / "result.json").write_text("\x00")
    out = outputs(tab.show(str(run_dir), None, runs_dir=runs_dir))
    assert out["error"] == "" and out["files"]["visible"] is True
    rows = set(out["files"]["value"]["file"])
    assert {"merged/model.safetensors", "merged/merge_check.json"} <= rows
    assert "merge: merged = base + adapter" not in out["checks"]
    assert "Ollama template" not in out["checks"]


def test_a_run_outside_the_runs_dir_or_none_is_refused(runs_dir: Path, tmp_path: Path):
    (tmp_path / "other").mkdir()
    elsewhere = succeeded_run(tmp_path / "other")
    out = outputs(tab.show(str(elsewhere), None, runs_dir=runs_dir))
    assert "outside" in out["error"] or "not in" in out["error"]
    with pytest.warns(UserWarning, match="Pick a run"):
        out = start("merge", None, runs_dir)
    assert "Pick a run" in out["error"] and out["watching"] is None


def test_merge_starts_a_job_the_page_watches_to_the_end(runs_dir: Path, fake_merge):
    fake_merge(steps=10)
    run_dir = succeeded_run(runs_dir)
    began = time.monotonic()
    shown = start("merge", run_dir, runs_dir)
    assert time.monotonic() - began < 5  # the handler never waits for the job
    assert shown["error"] == "" and "**Merging** run" in shown["status"]
    assert shown["stop"]["interactive"] is True and shown["publish"]["interactive"] is False
    assert shown["timer"].active is True and shown["token"] == SKIP
    assert tab.tick(None) == (SKIP,) * len(NAMES)
    # Picking a run while the step runs keeps the watch.
    assert tab.show(str(run_dir), shown["watching"], runs_dir=runs_dir) == (SKIP,) * len(NAMES)
    shown = watch_until(shown, lambda s: s["watching"] is None)
    assert shown["status"].endswith("done.") and shown["error"] == ""
    assert "| merge: merged = base + adapter | ✅ pass |" in shown["checks"]
    assert "merged/model.safetensors" in list(shown["files"]["value"]["file"])
    assert shown["merge"]["interactive"] is True and shown["timer"].active is False


def test_a_running_step_can_be_cancelled(runs_dir: Path, fake_merge):
    fake_merge(steps=600)
    run_dir = succeeded_run(runs_dir)
    shown = start("merge", run_dir, runs_dir)
    shown = watch_until(shown, lambda s: "running" in str(s["status"]))
    with pytest.warns(UserWarning, match="was cancelled"):
        out = outputs(tab.cancel(shown["watching"]))
    assert "was cancelled" in out["error"] and out["watching"] is None
    assert not export.is_complete(run_dir / "merged")


def test_publish_from_the_page_takes_the_typed_token_and_keeps_it_nowhere(runs_dir: Path,
                                                                          monkeypatch):  # fmt: skip
    monkeypatch.delenv("HF_TOKEN", raising=False)
    run_dir = succeeded_run(runs_dir)
    merged(run_dir)
    with FakeHub(users={CANARY: ("alice", [], "write")}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)  # the job's huggingface_hub reads it
        shown = start("publish", run_dir, runs_dir, repo="alice/from-page", token=CANARY)
        assert shown["token"] == gr.update(value="")  # the field is emptied at once
        assert shown["error"] == "" and "**Publishing** run" in shown["status"]
        shown = watch_until(shown, lambda s: s["watching"] is None, timeout=120)
    assert shown["error"] == "", shown["error"]
    assert "[alice/from-page](" in shown["status"] and "| published | ✅ |" in shown["checks"]
    assert "README.md" in hub.repos["alice/from-page"]
    assert 'dragon.publish(run, "alice/from-page")' in shown["code"]
    page = json.dumps([str(v) for v in shown.values()])
    assert CANARY not in page  # not in the status, log, code or checks shown
    leaks = [p for p in run_dir.rglob("*") if p.is_file() and CANARY.encode() in p.read_bytes()]
    assert leaks == []


def test_publish_without_a_repo_is_refused_and_the_token_still_cleared(runs_dir: Path):
    run_dir = succeeded_run(runs_dir)
    with pytest.warns(UserWarning, match="Repo is empty"):
        out = start("publish", run_dir, runs_dir, token="hf_x")
    assert "Repo is empty" in out["error"] and out["token"] == gr.update(value="")
    assert files.job_dirs(run_dir) == []


def test_every_step_has_its_code():
    from dragonfarm_core.codegen.run import export_code

    assert 'dragon.export_gguf(run, quant="f16")' in export_code("/r", "gguf", quant="f16")
    assert 'dragon.serve_ollama(run, name="s", url="http://h:1")' in export_code(
        "/r", "ollama", name="s", url="http://h:1")  # fmt: skip
    code = export_code("/r", "publish", repo="a/b", what="adapter", private=True)
    assert 'dragon.publish(run, "a/b", what="adapter", private=True)' in code
    assert "HF_TOKEN" in code
    with pytest.raises(ValueError, match="one of merge, gguf, ollama, publish"):
        export_code("/r", "zip")


def fake_gguf(run_dir: Path, quant: str = "q8_0", passed: bool = True) -> Path:
    """A GGUF where llama.cpp's export puts it, with a check record as gguf_run writes it."""
    path = run_dir / f"merged-{quant}.gguf"
    path.write_bytes(b"GGUF" + b"\0" * 1200)
    info = path.stat()
    difference = None if passed else {"prompt": 1, "in": "prompt", "position": 5,
                                      "hf": {"id": 16, "text": "\n"}, "gguf": {"id": 3, "text": " "}}  # fmt: skip
    files.write_json(path.with_name(path.name + ".check.json"), {
        "passed": passed, "quant": quant, "prompts": 6, "templates_identical": passed,
        "replies_identical": 6 if passed else 5, "min_agree_tokens": 16, "max_new_tokens": 16,
        "first_difference": difference, "cases": [{"messages": "held-out text"}],
        "size_bytes": info.st_size, "mtime_ns": info.st_mtime_ns})  # fmt: skip
    return path


def test_the_gguf_round_trip_shows_pass_or_the_first_differing_token(runs_dir: Path):
    run_dir = succeeded_run(runs_dir)
    merged(run_dir)
    fake_gguf(run_dir, "q8_0")
    fake_gguf(run_dir, "f16", passed=False)
    out = outputs(tab.show(str(run_dir), None, runs_dir=runs_dir))
    checks = out["checks"]
    assert ("| GGUF template round trip (merged-q8_0.gguf) | ✅ pass | 6 prompts; prompt tokens "
            "identical: yes; greedy replies identical 6/6") in checks  # fmt: skip
    assert ("| GGUF template round trip (merged-f16.gguf) | ❌ fail | prompt (chat template) 1, "
            "token 5: transformers `'\\n'` (id 16), llama.cpp `' '` (id 3) |") in checks  # fmt: skip
    assert "merged-q8_0.gguf" in list(out["files"]["value"]["file"])


def test_ollama_from_the_page_registers_the_exported_gguf(runs_dir: Path):
    run_dir = succeeded_run(runs_dir)
    merged(run_dir)
    for name in ("tokenizer.json", "generation_config.json"):
        shutil.copyfile(BUNDLED / name, run_dir / "merged" / name)
    gguf = fake_gguf(run_dir)
    with FakeOllama("other") as server:
        shown = start("ollama", run_dir, runs_dir, name="from-page", url=server.url)
        assert shown["error"] == "" and "**Registering with Ollama**" in shown["status"]
        shown = watch_until(shown, lambda s: s["watching"] is None, timeout=120)
    assert shown["error"] == "", shown["error"]
    assert "Ollama serves it as `from-page`" in shown["status"]
    assert server.created["from-page"]["files"] == {gguf.name: next(iter(server.blobs))}
    assert "| Ollama template = HF chat template | ✅ pass | chatml:" in shown["checks"]
    assert "| registered with Ollama | ✅ | `from-page`" in shown["checks"]
    assert 'dragon.serve_ollama(run, name="from-page", url=' in shown["code"]
    assert "ollama/Modelfile" in list(shown["files"]["value"]["file"])


PANEL = ["status", "error", "log", "stop", "build", "timer", "pending"]


def test_without_llama_cpp_export_gguf_names_the_build_button_and_build_runs_as_a_job(
    runs_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv(llama_cpp.LLAMA_CPP_DIR_ENV, raising=False)
    monkeypatch.setenv(llama_cpp.CACHE_ENV, str(tmp_path / "cache"))
    run_dir = succeeded_run(runs_dir)
    merged(run_dir)
    with pytest.warns(UserWarning, match="No llama.cpp found"):
        out = start("gguf", run_dir, runs_dir)
    # What a pip user can do: the button on this page, or the command; no checkout's script.
    assert "Build llama.cpp" in out["error"] and "dragonfarm build-llama-cpp" in out["error"]
    assert "scripts/" not in out["error"] and out["watching"] is None
    assert llama_cpp_panel.status_text() == llama_cpp_panel.MISSING

    # Build runs the real build as a job. A build compiles for 10 minutes: here the cache is
    # complete already, so the job finds it and ends in seconds.
    complete_cache(llama_cpp.cache_dir())
    shown = dict(zip(PANEL, llama_cpp_panel.build_now(), strict=True))
    end = time.monotonic() + 60
    while shown["pending"] is not None:
        assert shown["stop"]["interactive"] is True and shown["build"]["interactive"] is False
        assert shown["timer"].active is True and "Building llama.cpp" in shown["status"]
        assert time.monotonic() < end, shown["status"]
        time.sleep(0.2)
        shown = dict(zip(PANEL, llama_cpp_panel.tick(shown["pending"]), strict=True))
    assert "Export GGUF works now" in shown["status"] and shown["error"] == ""
    assert "reused" in shown["log"]["value"] and shown["timer"].active is False
    assert shown["build"]["interactive"] is True and shown["stop"]["interactive"] is False
    # No restart: the page's line and Export GGUF look for llama.cpp again, and find it.
    assert "llama.cpp is ready" in llama_cpp_panel.status_text()
    assert llama_cpp.find_llama_cpp().found_by == "the build cache"
    assert llama_cpp_panel.tick(None) == (SKIP,) * len(PANEL)


def test_the_steps_cancel_says_what_it_stops(runs_dir: Path):
    """A new user's walk: under the llama.cpp line's Build and Cancel, a second button also said
    "Cancel"; the one that stops Merge, GGUF, Ollama or Publish now says so."""
    shown = outputs(tab.show(str(succeeded_run(runs_dir)), None, runs_dir=runs_dir))
    assert shown["stop"]["value"] == tab.STOP == "Cancel the running step"
    assert shown["stop"]["interactive"] is False  # nothing runs yet
