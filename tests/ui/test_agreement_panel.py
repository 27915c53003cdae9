"""A judge's agreement with the person's feedback in the app (ui.agreement_panel): the Evaluate
tab's "Check against my feedback" (figures, warning, disagreements, code) and the line beside a
judge's choice, read from the saved results without asking the judge. The judge is a local
server speaking the Anthropic Messages API (tests/llm/llm_fakes.py) that prefers "good"."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dragonfarm_core.conversation.feedback_store import record_event
from ui import agreement_panel, agreement_view, judge_panel, llm_form

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "llm"))
from llm_fakes import FakeAnthropic  # noqa: E402

NAMES = ["figures", "warning", "table", "code", "error", "line"]
CANARY = "sk-ant-agreement-canary-3c1e"


def prefers_good(prompt: str) -> dict:
    """Pairwise: the reply with "good" in it; rubric: 9 with "good", 2 without."""
    if "[Reply A]\n" in prompt:
        a = prompt.split("[Reply A]\n", 1)[1].split("\n\n[Reply B]", 1)[0]
        return {"text": json.dumps({"winner": "A" if "good" in a else "B", "rationale": "g"})}
    reply = prompt.split("[Assistant's reply]\n", 1)[1].split("\n\nAnswer with", 1)[0]
    return {"text": json.dumps({"score": 9 if "good" in reply else 2, "rationale": "s"})}


def feedback(runs_dir: Path, k: int) -> None:
    """k prompts with a liked reply, k with a disliked one, and one pair the judge gets wrong."""
    for i in range(k):
        record_event(runs_dir, kind="rating", messages=[{"role": "user", "content": f"q{i}"}],
                     reply=f"good {i}", verdict="up")  # fmt: skip
        record_event(runs_dir, kind="rating", messages=[{"role": "user", "content": f"r{i}"}],
                     reply=f"poor {i}", verdict="down")  # fmt: skip
    messages = [{"role": "user", "content": "the odd one"}]
    record_event(runs_dir, kind="rating", messages=messages, reply="good but wrong", verdict="down")
    record_event(runs_dir, kind="rating", messages=messages, reply="plain right", verdict="up")


def check(runs_dir: Path, url: str, model: str = "claude-test") -> dict:
    out = agreement_panel.check("Anthropic", model, url, CANARY, "", runs_dir=runs_dir,
                                make_judge=judge_panel.make_judge)  # fmt: skip
    return dict(zip(NAMES, out, strict=True))


@pytest.mark.slow
def test_check_shows_figures_warning_disagreements_and_code(runs_dir):
    feedback(runs_dir, 4)
    with FakeAnthropic(answer=prefers_good) as server:
        shown = check(runs_dir, server.url)
        asked = len(server.requests)
        assert asked == 8 + 2  # 8 replies scored alone, 1 pair asked in both orders
        assert shown["error"] == ""
        assert "accuracy 0.89" in shown["figures"] and "Cohen's kappa" in shown["figures"]
        assert "Measured on 9 cases, fewer than 20" in shown["warning"]
        table = shown["table"]["value"]
        assert len(table) == 1 and shown["table"]["label"] == "Disagreements (1)"
        assert {table.iloc[0]["reply A"], table.iloc[0]["reply B (pairs only)"]} == {
            "good but wrong", "plain right"}  # fmt: skip
        assert "dragon.judge_agreement(judge" in shown["code"] and CANARY not in shown["code"]
        assert "ANTHROPIC_API_KEY" in shown["code"]
        assert shown["line"].startswith("⚠ Agreement with your feedback")
        # Beside the judge, anywhere: read from the saved result; the judge is not asked.
        line = agreement_panel.last_line("anthropic", "claude-test", runs_dir=runs_dir)
        assert "accuracy 0.89" in line and "fewer than 20" in line
        again = check(runs_dir, server.url)
        assert len(server.requests) == asked and "read from the cache" in again["figures"]


def test_no_feedback_is_a_clear_error_on_the_page(runs_dir):
    # The toast (gr.Warning) is a UserWarning outside a page.
    with (
        FakeAnthropic(answer=prefers_good) as server,
        pytest.warns(UserWarning, match="No feedback"),
    ):
        shown = check(runs_dir, server.url)
        assert server.requests == []
    assert "No feedback to measure the judge against" in shown["error"]
    assert "Chat" in shown["error"]


def test_a_judge_never_measured_says_so_and_labels_follow_the_judge_forms(runs_dir):
    line = agreement_panel.last_line("Anthropic", "", runs_dir=runs_dir)
    assert "not measured for this judge yet" in line
    assert agreement_panel.last_line("openai", "", runs_dir=runs_dir) == ""
    judge = agreement_panel.judge_of("local", "org/some-model", runs_dir)
    assert judge == {"provider": "local", "model": "org/some-model"}
    assert agreement_panel.judge_of("Anthropic", " ", runs_dir)["model"] == "claude-opus-5"
    assert llm_form.DEFAULT_CLAUDE == judge_panel.DEFAULT_CLAUDE


def test_the_short_line_carries_the_warning():
    summary = {"accuracy": 0.5, "kappa": 0.1, "kappa_ci95": [-0.2, 0.4], "judged": 30,
               "measured_at": "2026-12-07T13:00:00Z", "warning": "Low agreement: kappa 0.10."}  # fmt: skip
    line = agreement_view.short_line(summary)
    assert line.startswith("⚠") and "kappa 0.10 (95 % -0.20 to 0.40), n=30" in line
    assert line.endswith("Low agreement: kappa 0.10.")
    assert agreement_view.warning_html(None) == ""
    assert "&lt;b&gt;" in agreement_view.warning_html("<b>")
