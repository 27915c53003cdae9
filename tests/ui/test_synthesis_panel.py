"""The Data tab's Synthesize section and the Feedback tab's pairs from a run's own samples
(ui.synthesize_panel, ui.pairs_panel, ui.synthesis_watch, ui.llm_form):
handlers called directly, the jobs real (`python -m dragonfarm_core.batches.jobs`), the teacher,
student and judge local HTTP servers spoken to through the official clients.

A key typed into the password field must reach the server and nothing else: not the code
panel, any output, the job's files or its log.
"""

from __future__ import annotations

import json
import threading
import time

import gradio as gr
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.rundir import files
from dragonfarm_core.synthesis import synthesize as synthesis
from tests.llm.llm_fakes import FakeOpenAI
from ui import llm_form, pairs_panel, synthesis_watch, synthesize_panel

CANARY = "sk-typed-canary-2b9f-do-not-write"
VIEW = ["mapped", "counts", "error", "preview", "code", "go", "stop", "timer", "watching"]


def outputs(out: tuple) -> dict:
    return dict(zip(VIEW, out, strict=True))


def finish(started: tuple, timeout: float = 120) -> dict:
    """Tick like the page's timer until the job has ended; the last outputs."""
    view = outputs(started)
    watching = view["watching"]
    assert watching is not None, view["error"]
    deadline = time.monotonic() + timeout
    while watching.job.state in synthesis_watch.ACTIVE:
        assert time.monotonic() < deadline, watching.job.logs(30)
        time.sleep(0.2)
    return outputs(synthesis_watch.tick(watching))


def judge_answer(prompt: str) -> dict | None:
    """The judge's side of the fake server: 9 for replies with steps, 3 for the others."""
    if "Rate the assistant's reply" not in prompt:
        return None
    reply = prompt.split("[Assistant's reply]\n", 1)[1].split("\n\nAnswer with", 1)[0]
    return {"text": json.dumps({"score": 9 if "1." in reply else 3, "rationale": "steps"})}


def form(kind="openai", model="m", url="", key=""):
    """A teacher or judge form's values, by name."""
    return {"kind": kind, "model": model, "url": url, "key": key}


QUALITY = {"system": "Be warm.", "min_chars": 1, "max_chars": 0, "alpha": 0.0, "dedupe": True,
           "near": 0.92, "max_new_tokens": 64, "temperature": 0.7}  # fmt: skip


def synth_inputs(teacher, gate=False, judge=None, min_score=7, rubric="", **quality):
    """start_synthesis' teacher, judge and settings, by name."""
    settings = {**QUALITY, **quality, "gate": gate, "min_score": min_score, "rubric": rubric}
    return {"teacher": teacher, "judge": judge or form(), "settings": settings}


@pytest.mark.slow
def test_synthesize_from_the_mapped_data_with_a_typed_key_and_a_judge_gate(
    mapped, chat_model, runs_dir
):
    def answer(prompt):
        judged = judge_answer(prompt)
        if judged:
            return judged
        steps = "1. Reset it.\n2. Wait." if "1" in prompt else "No idea."
        return {"text": f"About {prompt}: {steps}"}

    with FakeOpenAI(answer=answer) as server:
        teacher = form(url=server.url, key=CANARY)
        judge = form(url=server.url, key=CANARY)
        started = synthesize_panel.start_synthesis(
            mapped.split(0.25, seed=1), chat_model, "data", None, "train", 0,
            **synth_inputs(teacher, gate=True, judge=judge, dedupe=False), runs_dir=runs_dir,
        )  # fmt: skip
        first = outputs(started)
        assert first["error"] == "" and "Synthesis" in first["counts"]
        done = finish(started)
    ds = done["mapped"]
    assert isinstance(ds, synthesis.SynthesizedDataset)
    assert ds.synthesis["dropped"]["below_min_score"] > 0 and ds.synthesis["kept"] > 0
    assert all("1" in r["prompt"] for r in files.read_jsonl(ds.source))
    assert (ds.eval_frac, ds.seed) == (0.25, 1)  # the mapped data's split carries over
    assert done["counts"].startswith(f"**Kept {ds.synthesis['kept']} of 24 prompts.**")
    assert "below min score" in done["counts"] and "Train tab" in done["counts"]
    assert list(done["preview"].columns)[:2] == ["prompt", "response"]
    code = done["code"]
    assert "dragon.synthesize(" in code and "judge=dragon.judge_openai(" in code
    assert 'system="Be warm."' in code and "max_new_tokens=64" in code
    assert "key typed in the app is not shown" in code
    assert all(CANARY in r["headers"].get("authorization", "") for r in server.requests)
    for value in done.values():
        assert CANARY not in str(value)
    for path in runs_dir.rglob("*"):
        if path.is_file():
            assert CANARY not in path.read_text(encoding="utf-8", errors="replace"), path


def test_synthesize_needs_mapped_data_or_a_run(chat_model, runs_dir):
    out = outputs(synthesize_panel.start_synthesis(
        None, chat_model, "data", None, "train", 0, **synth_inputs(form(url="http://h/v1")),
        runs_dir=runs_dir,
    ))  # fmt: skip
    assert "No mapped dataset yet" in out["error"] and out["watching"] is None
    out = outputs(synthesize_panel.start_synthesis(
        None, chat_model, "run", None, "train", 0, **synth_inputs(form(url="http://h/v1")),
        runs_dir=runs_dir,
    ))  # fmt: skip
    assert "Pick a run" in out["error"]
    assert not (runs_dir / files.JOBS_DIR).exists()


@pytest.mark.slow
def test_pairs_from_a_runs_own_samples_under_a_judge(mapped, chat_model, runs_dir, monkeypatch):
    run = dragon.train(mapped, chat_model.base, runs_dir=runs_dir, wait=True)
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def answer(prompt):
        judged = judge_answer(prompt)
        if judged:
            return judged
        with lock:  # the student's two samples of a prompt: one without steps, one with
            seen[prompt] = seen.get(prompt, 0) + 1
            good = seen[prompt] % 2 == 0
        return {"text": f"{'1. Reset.' if good else 'Dunno'} ({prompt})"}

    with FakeOpenAI(answer=answer) as server:
        # The run answers through the session's backend: here a server standing in for it.
        monkeypatch.setenv("DRAGONFARM_BACKEND", f"server:{server.url}|student")
        started = pairs_panel.start_pairs(
            str(run.dir), "train", 5, 2, 2, 0.8, 32, "", form(url=server.url),
            runs_dir=runs_dir,
        )  # fmt: skip
        done = finish(started)
    pairs = done["mapped"]
    assert done["error"] == "", done["error"]
    assert pairs.mapping.kind == "pairs" and pairs.synthesis["kept"] == 5
    rows = files.read_jsonl(pairs.source)
    assert all(r["chosen"].startswith("1.") and r["chosen_score"] == 9 for r in rows)
    assert all(r["rejected_score"] == 3 for r in rows)
    assert "dragon.synthesize_pairs(" in done["code"]
    assert "dpo = dragon.prefer(pairs, student)" in done["code"]
    assert "DPO" in done["counts"]


def test_cancel_stops_the_job_and_writes_nothing(mapped, chat_model, runs_dir):
    with FakeOpenAI(answer=lambda p: {"text": "slow"}, delay=2.0) as server:
        started = synthesize_panel.start_synthesis(
            mapped, chat_model, "data", None, "train", 0,
            **synth_inputs(form(url=server.url)), runs_dir=runs_dir,
        )  # fmt: skip
        watching = outputs(started)["watching"]
        out = outputs(synthesis_watch.cancel(watching))
    assert out["counts"].startswith("Cancelled") and out["watching"] is None
    assert watching.job.state == "cancelled"
    assert not (runs_dir / files.SYNTHETIC_DIR).exists()


def test_the_form_shows_the_fields_each_provider_needs(runs_dir, tmp_path):
    url, key, model = llm_form.show_fields("local")
    assert url["visible"] is False and key["visible"] is False
    url, key, model = llm_form.show_fields("openai")
    assert url["visible"] is True and key["visible"] is True
    with pytest.raises(ValueError, match="Name the local teacher"):
        llm_form.make_llm("local", "", "", "", role="teacher", runs_dir=runs_dir)
    assert llm_form.make_llm("local", " org/model ", "", "", role="teacher", runs_dir=runs_dir) == (
        "org/model"
    )
    with pytest.raises(ValueError, match="outside the runs directory"):
        llm_form.make_llm("local", str(tmp_path), "", "", role="teacher", runs_dir=runs_dir)
    made = llm_form.make_llm("anthropic", "", "", CANARY, role="t", runs_dir=runs_dir)
    expr, notes = llm_form.model_code(made)
    assert expr == "dragon.llm_anthropic()" and "ANTHROPIC_API_KEY" in " ".join(notes)
    assert CANARY not in expr + "".join(notes)


def test_counts_markdown_lists_only_the_reasons_that_dropped_rows():
    record = {"in": 5, "kept": 3, "file": "/x/s.jsonl", "dropped": {"too_short": 2, "garbled": 0},
              "reasons": synthesis.SYNTH_REASONS}  # fmt: skip
    text = synthesis_watch.counts_markdown(record)
    assert "**Kept 3 of 5 prompts.** Written to `/x/s.jsonl`." in text
    assert "| too short | 2 | shorter than min_chars |" in text and "garbled" not in text


def test_the_sections_are_in_the_data_and_feedback_tabs(tmp_path):
    app = dragon.app(tmp_path / "runs")
    ids = {getattr(b, "elem_id", None) for b in app.blocks.values()}
    assert {"synth-go", "synth-teacher-key", "pairs-go", "pairs-judge-kind"} <= ids
    key = next(b for b in app.blocks.values() if getattr(b, "elem_id", None) == "synth-teacher-key")
    assert isinstance(key, gr.Textbox) and key.type == "password"
