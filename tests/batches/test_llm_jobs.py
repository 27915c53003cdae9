"""Judge batches as jobs (dragonfarm_core.batches.jobs): the child rebuilds the judge from its
description, generates through the local backend (the stand-in worker, tests/inference/
fake_worker.py, which echoes the prompt) and asks the fake Claude server; progress, result and
cancel through the one job runner."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.batches import jobs as llm_jobs
from dragonfarm_core.llm import descriptions as llm_descriptions
from dragonfarm_core.rundir import files
from tests.judging.judge_runs import make_run, sft_row
from tests.llm.llm_fakes import FakeAnthropic, FakeOpenAI

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture
def echo_worker(tmp_path, monkeypatch):
    """Children generate through the stand-in worker (it needs no model)."""
    monkeypatch.setenv("DRAGONFARM_WORKER_MODULE", "fake_worker")
    monkeypatch.setenv("FAKE_WORKER_MARKER", str(tmp_path / "worker-marker"))
    paths = [str(TESTS / "inference"), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))


def scoring(prompt: str) -> dict:
    return {"text": json.dumps({"score": 7 if "echo: question" in prompt else 1, "rationale": "r"})}


@pytest.mark.slow
def test_a_judge_job_runs_in_a_child_and_its_result_is_the_judgement(llm_runs_dir, echo_worker):
    run = make_run(llm_runs_dir, "sft", [sft_row(i) for i in range(5)])
    with FakeAnthropic(answer=scoring) as server:
        judge = dragon.judge_anthropic(api_key="sk-typed", base_url=server.url)
        job = llm_jobs.start_judge(run, judge, n=3, rubric="Echo well.")
        assert job.job.dir.parent == run.dir / files.JOBS_DIR
        assert job.job.dir.name.startswith("judge-")
        status = job.wait(timeout=90)
    assert status["state"] == "succeeded", job.logs(40)
    result = job.result()
    assert result.mode == "rubric" and result.summary["mean_score"] == 7.0
    assert result.details["reply"].tolist()[0].startswith("echo: question")
    assert (
        len(server.requests) == 3
        and "Echo well." in server.requests[0]["body"]["messages"][0]["content"]
    )
    last = job.progress()
    assert last["done"] == last["total"] == 6 and last["stage"] == "judging"
    assert run.status()["judge"]["label"] == "score 7.0/10 (n=3)"
    spec = files.read_json(job.job.dir / llm_jobs.SPEC)
    assert spec["kind"] == "judge" and spec["judge"]["provider"] == "anthropic"
    assert spec["args"]["rubric"] == "Echo well." and "sk-typed" not in json.dumps(spec)
    assert any("judged: score 7.0/10" in line for line in job.logs(20))


def test_a_judge_job_can_be_cancelled(llm_runs_dir, echo_worker):
    run = make_run(llm_runs_dir, "sft", [sft_row(i) for i in range(3)])
    with FakeOpenAI(answer=lambda p: {"stall": 30}) as server:
        judge = dragon.judge_openai("m", server.url, max_active=1, timeout=60)
        job = llm_jobs.start_judge(run, judge)
        end = time.monotonic() + 60
        while not server.requests:  # the judge's first question is in flight
            assert time.monotonic() < end and not job.done, job.logs(30)
            time.sleep(0.05)
        job.cancel(timeout=10)
    assert job.state == "cancelled"
    assert not (run.dir / files.JUDGE).exists()
    with pytest.raises(RuntimeError, match="was cancelled"):
        job.result()


def test_a_second_judge_job_on_a_run_is_refused_while_one_runs(llm_runs_dir, echo_worker):
    run = make_run(llm_runs_dir, "sft", [sft_row(0)])
    with FakeOpenAI(answer=lambda p: {"stall": 30}) as server:
        judge = dragon.judge_openai("m", server.url, max_active=1)
        job = llm_jobs.start_judge(run, judge)
        try:
            with pytest.raises(RuntimeError, match="in progress already"):
                llm_jobs.start_judge(run, judge)
        finally:
            job.cancel(timeout=5)


def test_descriptions_rebuild_the_same_llm():
    claude = dragon.judge_anthropic(model="claude-x", max_tokens=99, base_url="http://h:1",
                                    system="Be fair.", temperature=0.2)  # fmt: skip
    assert llm_descriptions.llm_from_description(claude.describe()).describe() == claude.describe()
    assert llm_descriptions.llm_from_description(claude.describe(), "k")._api_key == "k"
    gpt = dragon.llm_openai("m", "http://h:2/v1", api_key_env="MY_SERVER_KEY", max_active=2)
    assert llm_descriptions.llm_from_description(gpt.describe()).describe() == gpt.describe()
    local = dragon.judge_local("dragonfarm/tiny-support", max_new_tokens=64)
    assert llm_descriptions.llm_from_description(local.describe()).describe() == local.describe()
    with pytest.raises(ValueError, match="cannot run as a background job"):
        llm_descriptions.llm_from_description({"provider": "function", "model": "m.f"})
    with pytest.raises(ValueError, match="must not hold a key"):
        llm_jobs.start("judge", {"note": "sk-secret"}, keys={"judge": "sk-secret"})
    with pytest.raises(ValueError, match="Unknown job kind"):
        llm_jobs.start("nope", {})
