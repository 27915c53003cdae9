"""Evaluate tab handlers: finished runs to pick, dragon.evaluate's summary, measures, metrics and
samples, the code panel, refusals shown as they are, and a recompute watched as a job.

Runs are trained by tests/fake_trainer.py (the `runs_dir` fixture in conftest.py), which writes
no eval.json or samples.json: each test writes what the real trainer would. A recompute runs
tests/fake_job.py in place of the evaluator.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from pathlib import Path

import gradio as gr
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.evaluation import evaluate as evaluation
from dragonfarm_core.rundir import create, files
from ui import watch
from ui.tabs import evaluate

FAKE_JOB = str(Path(__file__).resolve().parents[1] / "fake_job.py")
NAMES = ["summary", "measures", "metrics", "samples", "code", "error", "log", "stop", "go",
         "timer", "watching"]  # fmt: skip

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
    shown = dict(zip(NAMES, out, strict=True))
    for name in ("measures", "samples"):  # shown once there is a result, hidden while measuring
        if shown[name] != SKIP and shown[name]["visible"] is True:
            shown[name] = shown[name]["value"]
    return shown


def run_snippet(code: str) -> dict:
    namespace: dict = {"__name__": "__snippet__"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(code, "<code panel>", "exec"), namespace)
    return namespace


@pytest.mark.slow
def test_only_runs_that_have_ended_are_listed(mapped, model, runs_dir: Path, sft_run):
    queued = create.create_run("sft", mapped, model, runs_dir=runs_dir, name="waiting")
    assert evaluate.run_choices(runs_dir) == [(f"{sft_run.id} (sft, succeeded)", str(sft_run.dir))]
    update, seen = evaluate.refresh_runs(runs_dir, None, None)
    assert [value for _, value in update["choices"]] == [str(sft_run.dir)]
    assert update["value"] is None
    assert evaluate.refresh_runs(runs_dir, watch.runs_version(runs_dir), None) == (SKIP, SKIP)
    assert evaluate.select(runs_dir, str(sft_run.dir))["value"] == str(sft_run.dir)
    assert evaluate.select(runs_dir, str(queued)) == SKIP  # not finished: stays as it was


@pytest.mark.slow
def test_a_run_shown_as_picked_fills_the_panel_without_measuring(
    sft_run, mapped, model, runs_dir: Path
):
    """The picker's change (picked by hand, or selected on another tab) shows what training
    wrote and the code; nothing is measured, scored or written."""
    files.write_json(sft_run.dir / files.METRICS, {"exact": {"mean": 0.5}})
    before = sorted(p.name for p in sft_run.dir.rglob("*"))
    out = outputs(evaluate.show(str(sft_run.dir), ["exact"], "", 2, False, None,
                                runs_dir=runs_dir))  # fmt: skip
    assert out["summary"].startswith(f"**Run `{sft_run.id}`** (SFT): 2 samples, as training")
    assert dict(out["measures"].values.tolist())["perplexity"] == "3.49"
    assert list(out["samples"]["generated"]) == [s["generated"] for s in SAMPLES]
    assert out["metrics"]["value"].values.tolist() == [["exact", "0.5"]]  # stored earlier
    assert f'dragon.evaluate("{sft_run.dir}", n_samples=2, metrics=["exact"])' in out["code"]
    assert out["error"] == "" and out["go"]["interactive"] is True
    assert sorted(p.name for p in sft_run.dir.rglob("*")) == before  # no job, no write
    raw = evaluate.show(sft_run.id, [], "", 2, False, None, runs_dir=runs_dir)[3]
    widths = dict(zip(raw["value"].columns, raw["column_widths"], strict=True))
    assert float(widths["generated"].rstrip("%")) >= 20  # the replies are on screen too
    assert run_snippet(out["code"])["ev"].run_id == sft_run.id

    # A finished run without eval.json: the code, and what Evaluate will do.
    (sft_run.dir / files.EVAL).unlink()
    out = outputs(evaluate.show(sft_run.id, [], "", 3, True, None, runs_dir=runs_dir))
    assert "has no evaluation from its training" in out["summary"] and sft_run.id in out["summary"]
    assert out["measures"]["visible"] is False and "recompute=True" in out["code"]
    # No run, a run outside the runs dir, and a recompute under way (its view stays).
    out = outputs(evaluate.show(None, [], "", 10, False, None, runs_dir=runs_dir))
    assert evaluate.NO_RUN in out["summary"] and out["code"] == evaluate.CODE_HINT
    out = outputs(evaluate.show("../elsewhere", [], "", 10, False, None, runs_dir=runs_dir))
    assert "outside" in out["error"] and out["code"] == evaluate.CODE_HINT
    assert evaluate.show(sft_run.id, [], "", 10, False, "watching", runs_dir=runs_dir) == (
        (SKIP,) * len(NAMES)
    )


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.fixture
def slow_evaluator(monkeypatch: pytest.MonkeyPatch):
    """The recompute runs tests/fake_job.py: `steps` steps of 0.05 s, then it writes eval.json
    and the samples as the evaluator would."""

    def use(steps: int) -> None:
        def command(run_dir: Path, n_samples: int, job_dir: Path) -> list[str]:
            return [sys.executable, FAKE_JOB, str(job_dir), "--steps", str(steps), "--step-s",
                    "0.05", "--eval-of", str(run_dir), "--n-samples", str(n_samples)]  # fmt: skip

        monkeypatch.setattr(evaluation, "evaluator_command", command)

    return use


def watch_until(shown: dict, done, timeout: float = 30) -> tuple[dict, list[str]]:
    """Tick as the page's timer does until `done(shown)`; (last outputs, summaries seen)."""
    summaries, end = [shown["summary"]], time.monotonic() + timeout
    watching = shown["watching"]
    while not done(shown):
        assert time.monotonic() < end, f"still {shown['summary']!r} after {timeout} s"
        time.sleep(0.1)
        out = outputs(evaluate.tick(watching))
        if out["watching"] != SKIP:  # a tick that read nothing leaves everything as it was
            shown, watching = out, out["watching"]
            summaries.append(shown["summary"])
    return shown, summaries


@pytest.mark.slow
def test_measuring_again_returns_at_once_and_the_page_watches_the_job(
    sft_run, runs_dir: Path, slow_evaluator
):
    slow_evaluator(steps=20)  # a second of work
    began = time.monotonic()
    shown = outputs(
        evaluate.run_evaluation(str(sft_run.dir), ["exact"], "", 3, True, runs_dir=runs_dir)
    )
    assert time.monotonic() - began < 5  # the handler never waits for the evaluator
    assert "measuring again with the saved adapter" in shown["summary"]
    assert shown["stop"]["interactive"] is True and shown["go"]["interactive"] is False
    assert shown["timer"].active is True and shown["error"] == ""
    assert "recompute=True" in shown["code"]
    job = shown["watching"].pending.job
    assert job.dir.parent == sft_run.dir / files.JOBS_DIR and job.dir.name.startswith("evaluate-")

    assert evaluate.tick(None) == (SKIP,) * len(NAMES)  # nothing to watch: nothing read
    shown, summaries = watch_until(shown, lambda s: s["watching"] is None)
    assert any("running" in s for s in summaries if s != SKIP)
    assert shown["summary"].startswith(f"**Run `{sft_run.id}`** (SFT): 3 samples, measured again")
    assert shown["error"] == "" and shown["timer"].active is False
    assert shown["go"]["interactive"] is True and shown["stop"]["interactive"] is False
    assert list(shown["samples"]["generated"]) == [f"Reset it ({i})." for i in range(3)]
    assert shown["metrics"]["value"].values.tolist() == [["exact", "1"]]
    assert job.state == "succeeded" and any(line == "step 20" for line in job.logs(40))


@pytest.mark.slow
def test_a_running_recompute_can_be_cancelled_from_the_page(
    sft_run, runs_dir: Path, slow_evaluator
):
    slow_evaluator(steps=600)  # half a minute: it is cancelled long before
    shown = outputs(evaluate.run_evaluation(str(sft_run.dir), [], "", 3, True, runs_dir=runs_dir))
    shown, _ = watch_until(shown, lambda s: "running" in str(s["summary"]))
    assert shown["log"]["visible"] is True
    with pytest.warns(UserWarning, match="was cancelled"):
        out = outputs(evaluate.cancel(shown["watching"]))
    assert "was cancelled" in out["error"] and out["watching"] is None
    assert out["go"]["interactive"] is True and out["timer"].active is False
    assert shown["watching"].pending.state == "cancelled"
    assert files.read_eval(sft_run.dir) == SFT_EVAL  # the evaluator never wrote its results
