"""A sweep whose objective is a judge's score: the sweep's job judges each trial's run with an
LLM judge behind a local OpenAI-compatible server (the runs' replies come from the same server,
the session's DRAGONFARM_BACKEND). The judge's key reaches the job on stdin only: every judge
request carries it, and no file the sweep or its runs wrote holds it."""

from __future__ import annotations

import json
import math

import pytest

import dragonfarm_core as dragon
from tests.llm.llm_fakes import FakeOpenAI

KEY = "sk-sweep-canary-71c2-never-written"


def answer(prompt: str) -> dict[str, str]:
    """A rubric judge's JSON for a judge question; a reply for anything else."""
    if "[Assistant's reply]" in prompt:
        return {"text": json.dumps({"score": 6, "rationale": "r"})}
    return {"text": "A reply."}


@pytest.mark.slow
def test_a_judge_objective_judges_each_trial_with_the_key_from_stdin(base, runs_root, evaluating,
                                                                       monkeypatch):  # fmt: skip
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "2")
    monkeypatch.setenv("SWEEP_JUDGE_KEY", KEY)
    with FakeOpenAI(answer=answer) as server:
        monkeypatch.setenv("DRAGONFARM_BACKEND", f"server:{server.url}|stand-in")
        judge = dragon.judge_openai("scripted-judge", server.url, api_key_env="SWEEP_JUDGE_KEY")
        s = dragon.sweep(base, {"learning_rate": [1e-3, 3e-4]}, objective="judge_mean_score",
                         judge=judge, runs_dir=runs_root, wait=True)  # fmt: skip
        record = s.status()
        assert record["status"] == "succeeded", (record.get("error"), s.logs(40))
        judged = [r for r in server.requests if "[Assistant's reply]" in json.dumps(r["body"])]
    assert record["direction"] == "maximize" and record["prune"] is False
    # The trials' replies are the same, so the second trial's judgement is the cached first.
    assert len(judged) >= 1
    assert {r["headers"].get("authorization") for r in judged} == {f"Bearer {KEY}"}
    values = s.trials["judge_mean_score"].tolist()
    assert len(values) == 2 and all(math.isclose(v, 6.0) for v in values), s.trials
    for path in runs_root.rglob("*"):  # records, logs, the study, the judge's cache
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
