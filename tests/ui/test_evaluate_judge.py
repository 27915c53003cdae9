"""The Evaluate tab's Judge section (ui.judge_panel): a judge job started from the page and
watched by its timer, the results table, chart, position bias and code, refusals, cancel, and a
typed key that reaches the judge API and nothing else.

Runs are trained by tests/fake_trainer.py (the `runs_dir` fixture); the judge job's replies come
from the stand-in worker (tests/inference/fake_worker.py: "echo: <prompt>"), and the judge is a
local server speaking the Anthropic Messages API (tests/llm/llm_fakes.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import time
from pathlib import Path

import gradio as gr
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.codegen import run as codegen
from dragonfarm_core.rundir import files
from ui import judge_panel, judge_view

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "llm"))
from llm_fakes import FakeAnthropic, FakeOpenAI  # noqa: E402

NAMES = ["summary", "progress", "table", "chart", "bias", "code", "error", "log", "stop", "go",
         "timer", "judging"]  # fmt: skip
SKIP = gr.skip()
CANARY = "sk-ant-page-canary-71f0aa"
RUBRIC, PAIRWISE = judge_panel.MODES


@pytest.fixture
def model(tmp_path: Path) -> str:
    folder = tmp_path / "models" / "Tiny-Model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return str(folder)


@pytest.fixture
def sft_run(mapped, model, runs_dir: Path, tmp_path, monkeypatch) -> dragon.Run:
    monkeypatch.setenv("DRAGONFARM_WORKER_MODULE", "fake_worker")
    monkeypatch.setenv("FAKE_WORKER_MARKER", str(tmp_path / "worker-marker"))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(TESTS / "inference"), os.environ["PYTHONPATH"]])
    )
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    # 6 held-out rows.
    return dragon.train(mapped.split(eval_frac=0.25), model, runs_dir=runs_dir, wait=True)


def sent_key(request: dict) -> str | None:
    headers = request["headers"]
    return headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")


def outputs(out: tuple) -> dict:
    return dict(zip(NAMES, out, strict=True))


def watch_until_done(shown: dict, timeout: float = 90) -> tuple[dict, list[str]]:
    """Tick as the page's timer does until the job is no longer watched."""
    seen, end = [shown["summary"]], time.monotonic() + timeout
    while shown["judging"] is not None:
        assert time.monotonic() < end, f"still {shown['summary']!r}"
        time.sleep(0.2)
        shown = outputs(judge_panel.tick(shown["judging"]))
        seen.append(shown["summary"])
    return shown, seen


def pick_tuned_first(prompt: str) -> dict:
    """Claude's answer: always "A" (so the swap makes every verdict a tie)."""
    return {"text": json.dumps({"winner": "A", "rationale": "A reads better"})}


@pytest.mark.slow
def test_pairwise_from_the_page_with_a_typed_key(sft_run, runs_dir: Path):
    with FakeAnthropic(answer=pick_tuned_first) as server:
        began = time.monotonic()
        shown = outputs(
            judge_panel.start_judging(
                str(sft_run.dir), PAIRWISE, "base", "Anthropic", "", server.url, CANARY, 3,
                "Be concrete.", runs_dir=runs_dir,
            )
        )  # fmt: skip
        assert time.monotonic() - began < 10  # the handler never waits for the job
        assert shown["error"] == "" and shown["timer"].active is True
        assert shown["stop"]["interactive"] is True and shown["go"]["interactive"] is False
        assert "Judging run" in shown["summary"]
        shown, seen = watch_until_done(shown)
    assert shown["error"] == "", shown["error"]
    assert all(sent_key(r) == CANARY for r in server.requests)  # the judge API got it
    assert len(server.requests) == 6  # 3 prompts, each asked twice (swapped)
    assert "0 wins, 3 ties, 0 losses" in shown["summary"]
    assert shown["bias"]["visible"] is True and "Position bias: 1.00" in shown["bias"]["value"]
    table = shown["table"]["value"]
    assert list(table.columns)[:3] == ["prompt", "this run's reply", "the other reply"]
    assert table["verdict"].tolist() == ["tie"] * 3
    assert table["rationale (first)"].tolist() == ["A reads better"] * 3
    figure = shown["chart"]["value"]
    assert list(figure.data[0].x) == ["wins", "ties", "losses"]
    assert list(figure.data[0].y) == [0.0, 1.0, 0.0]
    # The code panel names the key's variable, never the key, and judges the same way.
    code = shown["code"]
    assert "ANTHROPIC_API_KEY" in code and 'against="base"' in code and "n=3" in code
    assert 'rubric="Be concrete."' in code
    # The key is in no output, no file under the runs dir, no log.
    assert CANARY not in repr([shown, seen])
    for path in runs_dir.rglob("*"):
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), path
    assert dragon.open_run(sft_run.dir).status()["judge"]["ties"] == 3
    assert dragon.runs(runs_dir).iloc[0]["judge"] == "vs base: 0W 3T 0L (n=3)"


@pytest.mark.slow
def test_picking_a_run_shows_its_earlier_judgement(sft_run, runs_dir: Path):
    shown = outputs(judge_panel.show_earlier(str(sft_run.dir), None, runs_dir=runs_dir))
    assert judge_panel.NOT_JUDGED in shown["summary"] and shown["table"]["visible"] is False
    assert shown["code"] == judge_panel.CODE_HINT
    with FakeAnthropic(answer=pick_tuned_first) as server:
        started = judge_panel.start_judging(
            str(sft_run.dir), PAIRWISE, "base", "Anthropic", "", server.url, CANARY, 3, None,
            runs_dir=runs_dir,
        )  # fmt: skip
        running = outputs(started)
        # a run picked while the job runs leaves the job's view alone
        assert judge_panel.show_earlier(None, running["judging"], runs_dir=runs_dir) == (
            (SKIP,) * judge_panel.N_OUTPUTS
        )
        watch_until_done(running)
    shown = outputs(judge_panel.show_earlier(str(sft_run.dir), None, runs_dir=runs_dir))
    assert "latest judgement" in shown["summary"] and "0 wins, 3 ties, 0 losses" in shown["summary"]
    assert shown["table"]["visible"] is True and len(shown["table"]["value"]) == 3
    assert shown["bias"]["visible"] is True
    assert 'against="base"' in shown["code"] and "n=3" in shown["code"]
    assert CANARY not in repr(shown)
    nothing = outputs(judge_panel.show_earlier(None, None, runs_dir=runs_dir))
    assert judge_panel.NO_RUN in nothing["summary"]
    outside = outputs(judge_panel.show_earlier("/etc", None, runs_dir=runs_dir))
    assert judge_panel.NOT_JUDGED in outside["summary"]


@pytest.mark.slow
def test_rubric_from_the_page_through_an_openai_compatible_server(sft_run, runs_dir: Path):
    def answer(prompt: str) -> dict:
        n = int(re.search(r"echo: Device (\d+)", prompt).group(1))
        return {"text": json.dumps({"score": 1 + n % 10, "rationale": f"device {n}"})}

    with FakeOpenAI(answer=answer) as server:
        shown = outputs(
            judge_panel.start_judging(
                str(sft_run.dir), RUBRIC, None, "OpenAI-compatible", "judge-model",
                server.url, "", 4, "", runs_dir=runs_dir,
            )
        )  # fmt: skip
        shown, _ = watch_until_done(shown)
    assert shown["error"] == "", shown["error"]
    assert "mean" in shown["summary"] and shown["bias"]["visible"] is False
    table = shown["table"]["value"]
    assert list(table.columns) == list(judge_view.RUBRIC_COLUMNS.values())
    assert len(table) == 4 and table["reference"].str.startswith("Reset it").all()
    assert sum(shown["chart"]["value"].data[0].y) == 4
    assert 'dragon.judge_openai("judge-model"' in shown["code"] and "n=4" in shown["code"]


@pytest.mark.slow
def test_refusals_are_shown(sft_run, runs_dir: Path, tmp_path: Path):
    def start(**changes):
        values = dict(run_dir=str(sft_run.dir), mode=RUBRIC, against=None, kind="Anthropic",
                      model="", url="", key="", n=5, rubric="")  # fmt: skip
        values.update(changes)
        with pytest.warns(UserWarning):
            return outputs(judge_panel.start_judging(**values, runs_dir=runs_dir))["error"]

    assert judge_panel.NO_RUN in start(run_dir=None)
    assert "ANTHROPIC_API_KEY" in start()
    assert "Name the model" in start(kind="OpenAI-compatible", url="http://127.0.0.1:1/v1")
    assert "ending in /v1" in start(kind="OpenAI-compatible", model="m", url="http://x")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert "folder" in start(kind="Local model", model=str(outside))
    assert "outside" in start(mode=PAIRWISE, against="../elsewhere", kind="Local model",
                              model="dragonfarm/tiny-support")  # fmt: skip
    assert "Prompts is empty" in start(n=None)
    assert "outside" in start(run_dir=str(outside))
    assert judge_panel.tick(None) == (SKIP,) * len(NAMES)


@pytest.mark.slow
def test_a_running_judge_can_be_cancelled_from_the_page(sft_run, runs_dir: Path):
    with FakeOpenAI(answer=lambda p: {"stall": 30}) as server:
        shown = outputs(
            judge_panel.start_judging(
                str(sft_run.dir), RUBRIC, None, "OpenAI-compatible", "m", server.url, "", 2, "",
                runs_dir=runs_dir,
            )
        )  # fmt: skip
        end = time.monotonic() + 60
        while not server.requests:
            assert time.monotonic() < end
            time.sleep(0.05)
        shown = outputs(judge_panel.tick(shown["judging"]))
        assert shown["progress"]["visible"] is True and "asking the judge" in shown["summary"]
        with pytest.warns(UserWarning, match="was cancelled"):
            out = outputs(judge_panel.cancel(shown["judging"]))
    assert "was cancelled" in out["error"] and out["judging"] is None
    assert out["go"]["interactive"] is True and out["timer"].active is False
    assert not (sft_run.dir / files.JUDGE).exists()


def test_the_fields_follow_the_mode_and_judge():
    against, url, key, model = judge_panel.show_fields(PAIRWISE, "Local model")
    assert against["visible"] is True and url["visible"] is False and key["visible"] is False
    assert model["value"] == dragon.BUNDLED_MODEL_ID
    against, url, key, model = judge_panel.show_fields(RUBRIC, "OpenAI-compatible")
    assert against["visible"] is False and url["visible"] is True and "/v1" in url["label"]


def test_the_model_the_box_shows_is_the_one_that_judges(runs_dir: Path):
    """A model shown in the box is a value Judge uses, never a grey placeholder: switching to
    the local judge fills in the bundled model, and that judges without being typed again."""
    *_, box = judge_panel.show_fields(RUBRIC, "Local model", judge_panel.DEFAULT_CLAUDE)
    assert box["value"] == dragon.BUNDLED_MODEL_ID and "placeholder" not in box
    judge = judge_panel.make_judge("Local model", box["value"], "", "", runs_dir)
    assert judge.describe()["model"] == dragon.BUNDLED_MODEL_ID
    with pytest.raises(ValueError, match="Name the local judge"):  # an empty box is empty
        judge_panel.make_judge("Local model", "", "", "", runs_dir)
    *_, box = judge_panel.show_fields(RUBRIC, "OpenAI-compatible", box["value"])
    assert box["value"] == "" and "qwen" in box["info"]  # a server's model is typed
    *_, box = judge_panel.show_fields(PAIRWISE, "Local model", "my-org/judge-7b")
    assert box["value"] == "my-org/judge-7b"  # what was typed stays
    *_, box = judge_panel.show_fields(RUBRIC, "Anthropic", "")
    assert box["value"] == judge_panel.DEFAULT_CLAUDE


@pytest.mark.slow
def test_the_code_panel_runs_as_shown(sft_run, monkeypatch):
    """The panel's code, pasted into Python: the same judgement (with a function judge in place
    of the server, and the stand-in backend in this process)."""
    code = codegen.judge_code(str(sft_run.dir), {"provider": "local", "model": "judge"},
                                     "base", 2, "Be brief.")  # fmt: skip

    class Echo:
        name, model = "local", None

        def chat(self, spec, messages, sampling, on_token=None):
            return self.generate(spec, [messages], sampling)[0]

        def generate(self, spec, conversations, sampling):
            return [f"echo: {c[-1]['content']}" for c in conversations]

    previous = dragon.set_backend(Echo())
    try:
        code = code.replace('judge = "judge"', 'judge = lambda ps: [\'{"winner": "B"}\'] * len(ps)')
        namespace: dict = {"__name__": "__snippet__"}
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            exec(compile(code, "<code panel>", "exec"), namespace)
    finally:
        dragon.set_backend(previous)
    j = namespace["j"]
    assert j.mode == "pairwise" and j.summary["n"] == 2 and j.settings["rubric"] == "Be brief."
