"""Pipelines tab handlers: the step list editor (add with each kind's settings, move, remove,
the chain checked before Start, naming the step), Start in the background, the timeline and
live view read from the record, ticks that read only after a change, cancel and resume, and a
second page (or a reloaded one) reattaching to the same pipeline.

Trainer processes run tests/fake_trainer.py (the `runs_dir` fixture in conftest.py), and the
pipeline job they run in inherits it.
"""

from __future__ import annotations

import time
from pathlib import Path

import gradio as gr
import pandas as pd
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.pipelines.steps import EvaluateStep, JudgeStep, PreferStep, TrainStep
from dragonfarm_core.rundir import pipeline_record
from dragonfarm_core.settings import TrainArgs
from ui import pipeline_builder, pipeline_form, pipeline_view
from ui.settings_form import shown_fields
from ui.tabs import pipelines

SKIP = gr.skip()
NO_JUDGE = {"kind": "anthropic", "model": "", "url": "", "key": ""}
VIEW = ["header", "timeline", "chart", "log", "code", "cancel", "resume", "error", "seen"]


def judge_form(kind: str, model: str, url: str, key: str = "") -> dict:
    """The judge form's values, by name."""
    return {"kind": kind, "model": model, "url": url, "key": key}


def kind_values(kind: str, **changes) -> dict:
    """Every kind's widget values (kind -> field -> value) as the page first shows them,
    `kind`'s changed."""
    with gr.Blocks():
        widgets = {k: pipeline_form.kind_widgets(k) for _, k in pipeline_form.KIND_CHOICES}
    return {k: {name: changes.get(name, w.value) if k == kind else w.value
                for name, w in made.items()}
            for k, made in widgets.items()}  # fmt: skip


def args_values(**changes) -> dict:
    defaults = TrainArgs()
    return {f.name: changes.get(f.name, getattr(defaults, f.name)) for f in shown_fields(TrainArgs)}


def add(steps, kind, mapped, runs_dir, data="active", defaults=True, judge=NO_JUDGE,
        rewards=None, **changes):  # fmt: skip
    return pipeline_builder.add_step(steps, kind, mapped, data, rewards, defaults, judge,
                                     kind_values(kind, **changes), args_values(),
                                     runs_dir=runs_dir)  # fmt: skip


def view(out: tuple) -> dict:
    return dict(zip(VIEW, out, strict=True))


def until(predicate, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.1)


def test_steps_are_added_with_their_settings_moved_and_removed(mapped, runs_dir):
    steps, listing, check, error = add([], "train", mapped, runs_dir, n_samples=3)
    assert error == "" and isinstance(steps[0], TrainStep)
    assert steps[0].dataset is mapped and steps[0].n_samples == 3 and steps[0].args is None
    steps, listing, check, _ = add(steps, "evaluate", mapped, runs_dir, metrics="exact, token_f1")
    assert isinstance(steps[1], EvaluateStep) and steps[1].metrics == ("exact", "token_f1")
    steps, listing, check, _ = add(steps, "prefer", mapped, runs_dir, data="pairs", beta=0.3)
    assert isinstance(steps[2], PreferStep) and steps[2].dataset is None and steps[2].beta == 0.3
    assert [label for label, _ in listing["choices"]] == [
        "1. train (dataset: tickets, n_samples: 3)",
        "2. evaluate (metrics: exact, token_f1)",
        "3. prefer (dataset: synthesized pairs, beta: 0.3)",
    ]
    assert listing["value"] == 2  # the new step is selected
    # A prefer step with no dataset and no synthesis before it is named before Start.
    assert "Step 3 (prefer)" in check and "synthesize_pairs" in check
    steps, listing, check, _ = pipeline_builder.move_step(steps, 1, -1)
    assert [s.kind for s in steps] == ["evaluate", "train", "prefer"] and listing["value"] == 0
    assert "Step 1 (evaluate)" in check and "no run to evaluate" in check
    steps, listing, check, _ = pipeline_builder.move_step(steps, 0, 1)
    steps, listing, check, _ = pipeline_builder.remove_step(steps, 2)
    assert [s.kind for s in steps] == ["train", "evaluate"] and listing["value"] == 1
    assert "Ready: 2 steps." in check


def test_training_settings_and_a_judge_come_from_the_page(mapped, runs_dir):
    steps, *_ = pipeline_builder.add_step(
        [], "train", mapped, "active", None, False, NO_JUDGE, kind_values("train"),
        args_values(epochs=2, max_steps="4"), runs_dir=runs_dir,
    )  # fmt: skip
    assert steps[0].args == TrainArgs(epochs=2, max_steps=4)
    judge = judge_form("openai", "judge-model", "http://127.0.0.1:9/v1")
    steps, listing, check, error = add(steps, "judge", mapped, runs_dir, judge=judge, n=3,
                                       against="base")  # fmt: skip
    assert error == "" and isinstance(steps[1], JudgeStep)
    assert steps[1].judge.provider == "openai" and steps[1].n == 3
    assert "judge: openai" in listing["choices"][1][0] and "Ready" in check


def test_a_step_that_cannot_be_made_says_why_and_changes_nothing(tickets, mapped, runs_dir):
    steps, listing, check, error = add([], "train", None, runs_dir)
    assert (steps, listing, check) == (SKIP, SKIP, SKIP)
    assert "no" in error and "Mapping tab" in error
    *_, error = add([], "train", mapped, runs_dir, n_samples=None)
    assert "n_samples is empty" in error
    judge = judge_form("openai", "", "http://127.0.0.1:9/v1")
    *_, error = add([], "judge", mapped, runs_dir, judge=judge)
    assert "Name the judge&#x27;s model" in error
    *_, error = pipeline_builder.move_step([], None, 1)
    assert "Pick a step" in error


def test_the_kind_shows_its_own_settings():
    shown = pipeline_builder.show_kind("prefer")
    kinds = [k for _, k in pipeline_form.KIND_CHOICES]
    assert [u["visible"] for u in shown[: len(kinds)]] == [k == "prefer" for k in kinds]
    assert [u["visible"] for u in shown[len(kinds) :]] == [True, False, True, False]
    assert [u["visible"] for u in pipeline_builder.show_kind("judge")[len(kinds) :]] == [
        False, True, False, False,
    ]  # fmt: skip
    assert [u["visible"] for u in pipeline_builder.show_kind("reinforce")[len(kinds) :]] == [
        False, False, True, True,
    ]  # fmt: skip


@pytest.mark.slow
def test_a_reinforce_step_takes_the_page_s_rewards_and_prompts(tickets, mapped, runs_dir):
    *_, error = add([], "reinforce", mapped, runs_dir)
    assert "needs at least one reward" in error
    prompts = dragon.dataset(tickets.source).map_prompts(prompt="{question}", reference="answer")
    rewards = [dragon.reward("contains"), dragon.reward("length", max_chars=80)]
    steps, *_ = add([], "train", mapped, runs_dir)
    steps, listing, check, error = add(steps, "reinforce", prompts, runs_dir, rewards=rewards,
                                       group_size=2)  # fmt: skip
    assert error == "" and steps[1].kind == "reinforce" and steps[1].group_size == 2
    assert list(steps[1].rewards) == rewards and steps[1].dataset is prompts
    assert "Ready: 2 steps" in check
    # An SFT mapping is not prompts for RL: the chain check names the step.
    steps, _, check, _ = add(steps, "reinforce", mapped, runs_dir, rewards=rewards)
    assert "Step 3 (reinforce)" in check


@pytest.mark.slow
def test_start_runs_in_the_background_and_the_timeline_follows_the_record(mapped, model, runs_dir):
    steps = [dragon.steps.train(mapped), dragon.steps.train(mapped, n_samples=2)]
    picker, started, error = pipelines.start(steps, model, "two-runs", runs_dir=runs_dir)
    assert error == "" and "Started pipeline" in started
    path = Path(picker["value"])
    assert path.parent == runs_dir / "pipelines" and path.name.endswith("-two-runs.json")
    assert picker["choices"][0][1] == str(path)
    record = dragon.pipeline_status(path)
    assert record["status"] in ("queued", "running", "succeeded")  # it returned at once
    until(lambda: dragon.pipeline_status(path)["status"] == "succeeded")
    shown = view(pipelines.show(str(path), runs_dir=runs_dir))
    assert shown["header"].startswith("**succeeded**") and "2 of 2 steps done" in shown["header"]
    table = shown["timeline"]
    assert list(table["step"]) == ["train", "train"]
    assert list(table["state"]) == ["✓ succeeded", "✓ succeeded"]
    assert (
        # Both steps are named "<pipeline>-<kind>"; two started in the same second get "-2".
        table["run"].str.contains(r"-two-runs-train(?:-\d+)?$").all()
        and table["summary"].str.contains("train loss").all()
    )
    assert len(shown["chart"].data) >= 1  # the last run's curve
    assert "done" in shown["log"]
    assert "dragon.pipeline(" in shown["code"] and "background=True" in shown["code"]
    assert shown["cancel"]["interactive"] is False and shown["resume"]["interactive"] is False
    # Nothing changed since: the next tick reads nothing.
    assert pipelines.tick(str(path), shown["seen"], runs_dir=runs_dir) == (SKIP,) * 9
    pipeline_record.update(path, name="renamed")  # any write to the record is shown
    assert pipelines.tick(str(path), shown["seen"], runs_dir=runs_dir)[0] != SKIP


def test_start_refuses_a_chain_that_cannot_run_naming_the_step(mapped, model, runs_dir):
    picker, started, error = pipelines.start([dragon.steps.evaluate(), dragon.steps.train(mapped)],
                                             model, "", runs_dir=runs_dir)  # fmt: skip
    assert (picker, started) == (SKIP, SKIP) and "Step 1 (evaluate)" in error
    assert not list((runs_dir / "pipelines").glob("*.json"))
    *_, error = pipelines.start([], model, "", runs_dir=runs_dir)
    assert "Add at least one step" in error


@pytest.mark.slow
def test_cancel_during_training_then_resume(mapped, model, runs_dir, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "60")
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.05")
    monkeypatch.setenv("FAKE_TRAINER_SAVE_EVERY", "5")
    picker, *_ = pipelines.start([dragon.steps.train(mapped), dragon.steps.train(mapped)], model,
                                 "stop-me", runs_dir=runs_dir)  # fmt: skip
    ref = picker["value"]
    until(lambda: (pipeline_record.read(Path(ref))["steps"][0]["run_dir"] or "") != "")
    running = view(pipelines.show(ref, runs_dir=runs_dir))
    assert running["cancel"]["interactive"] is True and running["resume"]["interactive"] is False
    assert "▶ running" in list(running["timeline"]["state"])
    view(pipelines.cancel(ref, runs_dir=runs_dir))  # returns at once (wait=False)
    until(lambda: dragon.pipeline_status(ref)["status"] == "cancelled")
    stopped = view(pipelines.show(ref, runs_dir=runs_dir))
    assert stopped["header"].startswith("**cancelled**") and "Resume continues" in stopped["header"]
    assert stopped["resume"]["interactive"] is True
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.001")
    resumed = view(pipelines.resume(ref, runs_dir=runs_dir))
    assert resumed["error"] == ""
    until(lambda: dragon.pipeline_status(ref)["status"] == "succeeded")
    assert [s["state"] for s in dragon.pipeline_status(ref)["steps"]] == ["succeeded"] * 2
    again = view(pipelines.resume(ref, runs_dir=runs_dir))  # nothing left to resume
    assert "already succeeded" in again["error"]


@pytest.mark.slow
def test_a_second_page_reattaches_to_the_newest_pipeline(mapped, model, runs_dir):
    assert pipelines.refresh_choices(runs_dir, None, None)[0]["value"] is None
    picker, *_ = pipelines.start([dragon.steps.train(mapped)], model, "p", runs_dir=runs_dir)
    until(lambda: dragon.pipeline_status(picker["value"])["status"] == "succeeded")
    fresh, version = pipelines.refresh_choices(runs_dir, None, None)  # a reloaded page
    assert fresh["value"] == picker["value"]
    assert pipelines.refresh_choices(runs_dir, version, fresh["value"]) == (SKIP, SKIP)
    first = view(pipelines.show(fresh["value"], runs_dir=runs_dir))
    second = view(pipelines.tick(fresh["value"], None, runs_dir=runs_dir))
    assert first["header"] == second["header"]
    pd.testing.assert_frame_equal(first["timeline"], second["timeline"])


def test_nothing_picked_says_how_to_start(runs_dir):
    shown = view(pipelines.show(None, runs_dir=runs_dir))
    assert pipelines.NO_PIPELINE in shown["header"] and shown["timeline"].empty
    assert shown["cancel"]["interactive"] is False


def test_timeline_table_durations_and_summaries():
    record = {"id": "p1", "model": "m", "status": "running", "current": 1,
              "started_at": "2026-12-01T10:00:00+00:00", "finished_at": None, "error": None,
              "steps": [
                  {"kind": "train", "state": "succeeded", "run": "r1",
                   "started_at": "2026-12-01T10:00:00+00:00",
                   "finished_at": "2026-12-01T10:01:05+00:00",
                   "summary": {"run": "r1", "method": "sft", "train_loss": 0.333333,
                               "eval_loss": None}},
                  {"kind": "evaluate", "state": "running", "run": None,
                   "started_at": "2026-12-01T10:01:05+00:00", "finished_at": None,
                   "summary": None},
              ]}  # fmt: skip
    now = pipeline_view.datetime.fromisoformat("2026-12-01T10:01:15+00:00")
    table = pipeline_view.timeline_table(record, now)
    assert list(table["duration"]) == ["1 min 05 s", "10 s"]
    assert list(table["summary"]) == ["method sft, train loss 0.3333", ""]
    assert list(table["state"]) == ["✓ succeeded", "▶ running"]
    header = pipeline_view.header_markdown(record, now)
    assert header == "**running** · pipeline `p1` of `m` · step 2 of 2 · 1 min 15 s"
