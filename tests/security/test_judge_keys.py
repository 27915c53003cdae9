"""A judge's API key, typed in (the app's password field) or set in the environment, reaches the
judge job only on its stdin: it is sent to the API, and appears in no file under the runs dir,
no log, not in the job's argv and not in its environment (nor its inference worker's)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil
import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "llm"))

from llm_fakes import FakeAnthropic  # noqa: E402

import dragonfarm_core as dragon  # noqa: E402
from dragonfarm_core.batches import jobs as llm_jobs  # noqa: E402
from dragonfarm_core.rundir import location  # noqa: E402
from tests.judging.judge_runs import make_run, sft_row  # noqa: E402

TYPED = "sk-ant-typed-canary-3c9e71"
FROM_ENV = "sk-ant-env-canary-8d24b0"


@pytest.fixture
def runs(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "runs"
    root.mkdir()
    monkeypatch.setattr(location, "_configured", None)
    monkeypatch.setenv(location.ENV_VAR, str(root))
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DRAGONFARM_WORKER_MODULE", "fake_worker")
    monkeypatch.setenv("FAKE_WORKER_MARKER", str(tmp_path / "worker-marker"))
    paths = [str(TESTS / "inference"), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    return root


def sent_key(request: dict) -> str | None:
    headers = request["headers"]
    return headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")


def processes_of(pid: int) -> list[psutil.Process]:
    try:
        proc = psutil.Process(pid)
        return [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def run_judge_job(runs: Path, judge, canary: str, server: FakeAnthropic) -> None:
    run = make_run(runs, "sft", [sft_row(i) for i in range(3)])
    job = llm_jobs.start_judge(run, judge, n=2)
    # While the job's first question waits at the server, look at the job's processes.
    end = time.monotonic() + 60
    while not server.requests:
        assert time.monotonic() < end and not job.done, job.logs(30)
        time.sleep(0.02)
    seen = processes_of(job.status()["pid"])
    assert seen, "the job ended before it could be looked at"
    for proc in seen:  # the job and its inference worker
        with_env = proc.environ()
        assert canary not in " ".join(proc.cmdline())
        assert not any(canary in v for v in with_env.values()), proc.cmdline()
        assert "ANTHROPIC_API_KEY" not in with_env
    status = job.wait(timeout=90)
    assert status["state"] == "succeeded", job.logs(40)
    assert all(sent_key(r) == canary for r in server.requests)  # the API got the key
    for path in runs.rglob("*"):
        if path.is_file():
            assert canary.encode() not in path.read_bytes(), path
    assert all(canary not in line for line in job.logs(500))


@pytest.mark.slow
def test_a_typed_key_goes_only_to_the_api(runs):
    with FakeAnthropic(answer=lambda p: {"text": '{"score": 6}'}, delay=0.5) as server:
        judge = dragon.judge_anthropic(api_key=TYPED, base_url=server.url)
        run_judge_job(runs, judge, TYPED, server)
    stored = dragon.open_run(runs / "sft")
    record = llm_jobs.files.read_json(stored.dir / "judge.json")["judge"]
    assert record["api_key"] == "passed as an argument (not recorded)"


@pytest.mark.slow
def test_a_key_from_the_environment_goes_only_to_the_api(runs, monkeypatch):
    with FakeAnthropic(answer=lambda p: {"text": '{"score": 6}'}, delay=0.5) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", FROM_ENV)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        run_judge_job(runs, dragon.judge_anthropic(), FROM_ENV, server)
    record = llm_jobs.files.read_json(runs / "sft" / "judge.json")["judge"]
    assert record["api_key_env"] == "ANTHROPIC_API_KEY"  # named, never its value


@pytest.mark.slow
def test_a_key_in_an_error_message_is_scrubbed_from_the_log_and_status(runs):
    # A server that echoes what it was sent into its error (some proxies do).
    with FakeAnthropic(script=[{"status": 400}] * 4) as server:
        server.error = lambda status: {"type": "error", "error": {"type": "invalid_request_error",
                                                                  "message": f"bad key {TYPED}"}}  # fmt: skip
        judge = dragon.judge_anthropic(api_key=TYPED, base_url=server.url)
        run = make_run(runs, "sft", [sft_row(0)])
        job = llm_jobs.start_judge(run, judge, n=1)
        job.wait(timeout=90)
    for path in runs.rglob("*"):
        if path.is_file():
            assert TYPED.encode() not in path.read_bytes(), path
