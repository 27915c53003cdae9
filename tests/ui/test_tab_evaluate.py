"""Evaluate tab handlers: finished runs to pick, dragon.evaluate's summary, measures, metrics and
samples, the code panel, and refusals shown as they are.

Runs are trained by tests/fake_trainer.py (the `runs_dir` fixture in conftest.py), which writes
no eval.json or samples.json: each test writes what the real trainer would.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import gradio as gr
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.rundir import create, files
from ui import watch
from ui.tabs import evaluate

SKIP = gr.skip()
SAMPLES = [
    {"prompt": "Device 1 reboots", "reference": "Reset it (1).", "generated": "Reset it (1)."},
    {"prompt": "Device 2 reboots", "reference": "Reset it (2).", "generated": "T-1234 opened."},
]
SFT_EVAL = {"eval_loss": 1.25, "perplexity": 3.49, "eval_tokens": 420, "eval_rows": 2, "step": 6}


@pytest.fixture
def model(tmp_path: Path) -> str:
    folder = tmp_path / "models" / "Tiny-Model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return str(folder)


@pytest.fixture
def sft_run(mapped, model, runs_dir: Path) -> dragon.Run:
    # 6 held-out rows, 2 samples written: asking for more than 2 would measure again.
    run = dragon.train(mapped.split(eval_frac=0.25), model, runs_dir=runs_dir, wait=True)
    files.write_eval(run.dir, SFT_EVAL)
    files.write_samples(run.dir, SAMPLES)
    return run


def outputs(out: tuple) -> dict:
    names = ["summary", "measures", "metrics", "samples", "code", "error"]
    shown = dict(zip(names, out, strict=True))
    for name in ("measures", "samples"):  # shown once there is a result
        if shown[name] != SKIP:
            assert shown[name]["visible"] is True
            shown[name] = shown[name]["value"]
    return shown


def run_snippet(code: str) -> dict:
    namespace: dict = {"__name__": "__snippet__"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(code, "<code panel>", "exec"), namespace)
    return namespace


def test_only_runs_that_have_ended_are_listed(mapped, model, runs_dir: Path, sft_run):
    queued = create.create_run("sft", mapped, model, runs_dir=runs_dir, name="waiting")
    assert evaluate.run_choices(runs_dir) == [(f"{sft_run.id} (sft, succeeded)", str(sft_run.dir))]
    update, seen = evaluate.refresh_runs(runs_dir, None, None)
    assert [value for _, value in update["choices"]] == [str(sft_run.dir)]
    assert update["value"] is None
    assert evaluate.refresh_runs(runs_dir, watch.runs_version(runs_dir), None) == (SKIP, SKIP)
    assert evaluate.select(runs_dir, str(sft_run.dir))["value"] == str(sft_run.dir)
    assert evaluate.select(runs_dir, str(queued)) == SKIP  # not finished: stays as it was


def test_an_sft_run_shows_loss_samples_metrics_and_code(sft_run, runs_dir: Path):
    out = outputs(
        evaluate.run_evaluation(
            str(sft_run.dir), ["exact"], r"^T-\d{4}", 2, False, runs_dir=runs_dir
        )
    )
    assert out["error"] == ""
    assert out["summary"].startswith(f"**Run `{sft_run.id}`** (SFT): 2 samples")
    measures = dict(zip(out["measures"]["measure"], out["measures"]["value"], strict=True))
    assert measures == {"eval loss": "1.25", "perplexity": "3.49", "held-out tokens": "420",
                        "held-out rows": "2"}  # fmt: skip
    assert list(out["measures"].columns) == ["measure", "value"]
    metrics = out["metrics"]
    assert metrics["visible"] is True
    assert metrics["value"].values.tolist() == [["exact", "0.5"], [r"regex:^T-\d{4}", "0.5"]]
    assert list(out["samples"]["generated"]) == [s["generated"] for s in SAMPLES]
    stored = files.read_json(sft_run.dir / files.METRICS)
    assert stored["exact"]["values"] == [1.0, 0.0]  # kept with the run

    # The code panel evaluates the same run the same way.
    assert 'metrics=["exact", dragon.metric_regex("^T-\\\\d{4}")]' in out["code"]
    ev = run_snippet(out["code"])["ev"]
    assert ev.run_id == sft_run.id and ev.metrics == {"exact": 0.5, r"regex:^T-\d{4}": 0.5}
    # Without metrics, the means stored earlier come back.
    out = outputs(evaluate.run_evaluation(str(sft_run.dir), [], "", 1, False, runs_dir=runs_dir))
    assert len(out["samples"]) == 1 and out["metrics"]["visible"] is True
    assert "metrics=" not in out["code"]


def test_a_grpo_run_shows_its_rewards_beside_the_start_model(tickets, model, runs_dir: Path):
    prompts = tickets.map_prompts(prompt="question", reference="answer")
    rewards = [dragon.reward("contains"), dragon.reward("length", max_chars=40)]
    run = dragon.reinforce(prompts, model, rewards, group_size=2, max_new_tokens=16,
                           runs_dir=runs_dir, wait=True)  # fmt: skip
    with pytest.warns(UserWarning, match="is its evaluation, and it has none yet"):
        out = outputs(evaluate.run_evaluation(str(run.dir), [], "", 10, False, runs_dir=runs_dir))
    assert (
        out["summary"] == SKIP
        and "only sft, dpo, orpo runs can be evaluated again" in (out["error"])
    )
    results = {"reward": 1.2, "eval_prompts": 2, "reward_contains": 0.5, "reward_length": 0.7,
               "start_reward": 0.4, "start_reward_contains": 0.1, "start_reward_length": 0.3,
               "step": 6}  # fmt: skip
    files.write_eval(run.dir, results)
    files.write_samples(run.dir, [s | {"reward": 1.0} for s in SAMPLES])
    out = outputs(
        evaluate.run_evaluation(str(run.dir), ["contains"], "", 10, False, runs_dir=runs_dir)
    )
    assert out["error"] == "" and "(GRPO)" in out["summary"]
    assert out["measures"].values.tolist() == [
        ["mean reward (total)", "1.2", "0.4"],
        ["held-out prompts", "2", ""],
        ["mean reward contains", "0.5", "0.1"],
        ["mean reward length", "0.7", "0.3"],
    ]
    assert list(out["measures"].columns)[-1] == "model it started from"
    with pytest.warns(UserWarning, match="grpo run"):
        out = outputs(evaluate.run_evaluation(str(run.dir), [], "", 10, True, runs_dir=runs_dir))
    assert "only sft, dpo, orpo runs can be evaluated again" in out["error"]


def test_refusals_are_shown(sft_run, mapped, model, runs_dir: Path):
    with pytest.warns(UserWarning):
        out = outputs(evaluate.run_evaluation(None, [], "", 10, False, runs_dir=runs_dir))
    assert out["summary"] == SKIP and evaluate.NO_RUN in out["error"]
    with pytest.warns(UserWarning, match="not a valid regex"):
        out = outputs(
            evaluate.run_evaluation(str(sft_run.dir), [], "(", 10, False, runs_dir=runs_dir)
        )
    assert "metric_regex: pattern" in out["error"]
    with pytest.warns(UserWarning, match="Samples is empty"):
        evaluate.run_evaluation(str(sft_run.dir), [], "", None, False, runs_dir=runs_dir)
    queued = create.create_run("sft", mapped, model, runs_dir=runs_dir)
    with pytest.warns(UserWarning, match="still queued"):
        evaluate.run_evaluation(str(queued), [], "", 10, False, runs_dir=runs_dir)
