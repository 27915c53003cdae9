"""A judge checked against the person's Chat feedback, as a person does it in Chromium: the
Evaluate tab's "Check against my feedback" shows the figures, the warning, the disagreements
and the Python beside the judge's choice; the synthesis gate's judge then shows the same
judge's last measured agreement, read from the saved result.

The feedback is written through the feedback store (as Chat's rate does); the judge is a local
server speaking the Anthropic Messages API (tests/llm/llm_fakes.py) that prefers "good".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from dragonfarm_core.conversation.feedback_store import record_event

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "llm"))
from llm_fakes import FakeAnthropic  # noqa: E402

WAIT_MS = 30_000
CANARY = "sk-ant-browser-agreement-5d2e"


def prefers_good(prompt: str) -> dict:
    if "[Reply A]\n" in prompt:
        a = prompt.split("[Reply A]\n", 1)[1].split("\n\n[Reply B]", 1)[0]
        return {"text": json.dumps({"winner": "A" if "good" in a else "B", "rationale": "g"})}
    reply = prompt.split("[Assistant's reply]\n", 1)[1].split("\n\nAnswer with", 1)[0]
    return {"text": json.dumps({"score": 9 if "good" in reply else 2, "rationale": "s"})}


def fill(page: Page, elem_id: str, text: str) -> None:
    box = page.locator(f"#{elem_id}").locator("textarea, input").first
    box.fill(text)
    box.press("Tab")


@pytest.mark.browser
def test_check_against_my_feedback_in_the_evaluate_tab(page: Page, app_server):
    runs = app_server[1]
    for i in range(3):
        record_event(runs, kind="rating", messages=[{"role": "user", "content": f"q{i}"}],
                     reply=f"good {i}", verdict="up")  # fmt: skip
    odd = [{"role": "user", "content": "the odd one"}]
    record_event(runs, kind="rating", messages=odd, reply="good but wrong", verdict="down")
    record_event(runs, kind="rating", messages=odd, reply="plain right", verdict="up")
    with FakeAnthropic(answer=prefers_good) as server:
        page.get_by_role("tab", name="Evaluate", exact=True).click()
        expect(page.locator("#judge-agreement-last")).to_contain_text(
            "not measured for this judge yet"
        )  # fmt: skip
        fill(page, "judge-model", "claude-test")
        fill(page, "judge-url", server.url)
        fill(page, "judge-key", CANARY)
        page.locator("#judge-check").click()
        figures = page.locator("#judge-agreement")
        expect(figures).to_contain_text("anthropic:claude-test", timeout=WAIT_MS)
        expect(figures).to_contain_text("accuracy 0.75")
        expect(figures).to_contain_text("Cohen's kappa")
        expect(page.locator("#judge-agreement-warning")).to_contain_text("fewer than 20")
        table = page.locator("#judge-disagreements")
        expect(table).to_contain_text("good but wrong")
        expect(table).to_contain_text("plain right")
        code = page.locator("#judge-code")
        expect(code).to_contain_text("dragon.judge_agreement(judge")
        expect(code).not_to_contain_text(CANARY)
        expect(page.locator("#judge-agreement-last")).to_contain_text("accuracy 0.75, kappa")
        asked = len(server.requests)
        assert asked == 3 + 2

        # Where a judge gates data: the synthesis gate's judge, the same model -> the same line.
        page.get_by_role("tab", name="Data", exact=True).click()
        page.get_by_text("Synthesize: answers from a teacher model").click()
        page.locator("#synth-gate input").check()
        fill(page, "synth-judge-model", "claude-test")
        line = page.locator("#synth-judge-agreement")
        expect(line).to_contain_text("accuracy 0.75, kappa", timeout=WAIT_MS)
        expect(line).to_contain_text("fewer than 20")
        assert len(server.requests) == asked  # shown from the saved result: no judge call
