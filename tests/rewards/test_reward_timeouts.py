"""A regex reward that backtracks without end neither freezes the app nor holds a trainer.

The searches run in the reward helper, each completion with REGEX_TIMEOUT_S (see
rewards/scoring.py). Anything that would hang on the old in-process search runs in a
subprocess under a deadline (regex_freeze_scene.py), so a regression fails here, not hangs.
Slow: the GRPO trainer with such a pattern stops with that reason instead of hanging.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.rewards import reward, score
from dragonfarm_core.rewards.scoring import REGEX_TIMEOUT_S
from dragonfarm_core.rundir import location
from dragonfarm_core.rundir.run import RunFailedError
from dragonfarm_core.settings import Hardware, TrainArgs

ROOT = Path(__file__).resolve().parents[2]
SCENE = Path(__file__).with_name("regex_freeze_scene.py")
DEADLINE_S = 240  # a hang, not a slow machine: the scene takes seconds to a minute


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> dict:
    runs = tmp_path_factory.mktemp("runs")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADIO_ANALYTICS_ENABLED": "False"}
    try:
        done = subprocess.run([sys.executable, str(SCENE), str(runs)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=DEADLINE_S)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"a backtracking regex reward froze its process for {DEADLINE_S} s")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_app_answers_while_a_dry_run_scores_a_backtracking_pattern(scene):
    assert scene["page_status"] == 200
    assert scene["dry_run_still_going"], "the page answered only once the dry run was over"


def test_the_dry_run_refuses_the_pattern_naming_the_time_limit(scene):
    message = scene["message"]
    assert "Dry run failed" in message
    assert f"gave up after {REGEX_TIMEOUT_S:g} s on one completion" in message
    assert "backtracks" in message and "Simplify the pattern" in message


def test_in_training_a_timed_out_completion_scores_0_and_counts_as_a_failure(scene):
    training = scene["training"]
    assert training["scores"] == [0.0, 1.0, 0.0]  # the completion with a NUL byte still scores
    assert training["counts"] == [3, 2]
    assert "failed on 2 of 3 completions" in training["stopped"]
    assert "RewardTimeout" in training["stopped"] and "gave up after" in training["stopped"]


def test_ordinary_patterns_score_as_before():
    ticket = reward("regex", pattern=r"^T-\d{4}")
    strict = reward("regex", pattern=r"^T-\d{4}", case_sensitive=True, name="strict")
    scores = score([ticket, strict], ["p"] * 3, ["T-1234: done", "t-1234", "no ticket"])
    assert scores.per_reward == {"regex": [1.0, 1.0, 0.0], "strict": [1.0, 0.0, 0.0]}


@pytest.mark.slow
def test_a_grpo_run_whose_regex_keeps_timing_out_stops_naming_the_limit(tmp_path, monkeypatch):
    """The real trainer on the bundled model: each timed-out completion scores 0 and counts as
    a failure, and past the error-rate limit the run fails with the timeout in its error."""
    for name in ("DRAGONFARM_TRAINER_MODULE", "DRAGONFARM_MAX_CONCURRENT", location.ENV_VAR):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(location, "_configured", None)
    questions = [f"Tell me everything about the outage of router {i}." for i in range(12)]
    prompts = dragon.dataset(pd.DataFrame({"question": questions})).map_prompts(prompt="question")
    run = dragon.reinforce(
        prompts, str(ROOT / "assets" / "models" / "tiny-support"),
        [reward("regex", pattern=r"((.+)+)+\x00"), reward("length", max_chars=300)],
        group_size=4, max_new_tokens=24,
        args=TrainArgs(max_steps=8, batch_size=2, grad_accum=1, logging_steps=1, max_seq_len=256),
        hardware=Hardware(device="cpu"), n_samples=1, runs_dir=tmp_path / "runs",
    )  # fmt: skip
    with pytest.raises(RunFailedError):
        run.wait()
    status = run.status()
    assert status["state"] == "failed", status
    assert "'regex' failed on" in status["error"]
    assert f"gave up after {REGEX_TIMEOUT_S:g} s on one completion" in status["error"]
