"""The Evaluate tab's agreement code: run as it is shown, it measures the same agreement (the
judge a local server speaking the Anthropic Messages API, tests/llm/llm_fakes.py)."""

from __future__ import annotations

import contextlib
import io
import json
import sys
import warnings
from pathlib import Path

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.codegen.agreement import agreement_code
from dragonfarm_core.conversation.feedback_store import record_event

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "llm"))
from llm_fakes import FakeAnthropic  # noqa: E402


def picks_first(prompt: str) -> dict:
    return {"text": json.dumps({"winner": "A", "rationale": "first"})}


@pytest.mark.slow
def test_the_code_shown_measures_the_same_agreement(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    runs = tmp_path / "runs"
    for i in range(3):
        messages = [{"role": "user", "content": f"q{i}"}]
        record_event(runs, kind="rating", messages=messages, reply=f"yes {i}", verdict="up")
        record_event(runs, kind="rating", messages=messages, reply=f"no {i}", verdict="down")
    with FakeAnthropic(answer=picks_first) as server, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        judge = dragon.judge_anthropic(model="claude-test", base_url=server.url)
        direct = dragon.judge_agreement(judge, runs_dir=runs, rubric="Be kind.", cache=False)
        source = agreement_code(judge.describe(), runs, rubric="Be kind.")
        assert f"runs_dir={str(runs)!r}".replace("'", '"') in source
        namespace: dict = {}
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            exec(compile(source, "agreement_code", "exec"), namespace)
    shown = namespace["agreement"]
    assert shown.summary["position_bias"] == direct.summary["position_bias"] == 1.0
    assert shown.summary["kappa"] == direct.summary["kappa"] and shown.cached
    assert "<Agreement of anthropic:claude-test" in printed.getvalue()
