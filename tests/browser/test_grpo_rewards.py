"""Drive the real app through GRPO: the example data mapped as prompts, GRPO picked, two rewards
built in the rewards builder, a few steps of the bundled model with the real trainer, the reward
curves appearing in the Monitor, and the finished run's rewards in the Evaluate tab.
"""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import Page, expect

import dragonfarm_core as dragon
from dragonfarm_core.models import bundled_model_path

# Points of one named trace, as the browser holds the figure (plotly keeps it on its graph div).
TRACE_POINTS = """(name) => {
    const plot = document.querySelector('#monitor-chart .js-plotly-plot');
    const trace = plot && plot.data ? plot.data.find((t) => t.name === name) : null;
    return trace ? trace.x.length : 0;
}"""
# Tiny on purpose: a few steps, 2 completions of at most 16 tokens per prompt.
SETTINGS = {"trainargs-max_steps": "3", "trainargs-logging_steps": "1",
            "trainargs-batch_size": "2", "trainargs-max_seq_len": "256",
            "reinforceargs-group_size": "2", "reinforceargs-max_new_tokens": "16"}  # fmt: skip
TRAINER_START_S = 90  # the trainer imports torch and loads the model before its first step
WAIT_MS = 30_000  # for handlers that read or write a run (the default 5 s is for clicks)


def trace_points(page: Page, name: str) -> int:
    return page.evaluate(TRACE_POINTS, name)


def wait_for_points(page: Page, name: str, timeout: float) -> int:
    end = time.monotonic() + timeout
    while (n := trace_points(page, name)) == 0:
        assert time.monotonic() < end, f"the {name!r} curve stayed empty for {timeout} s"
        time.sleep(0.25)
    return n


def fill_number(page: Page, elem_id: str, value: str) -> None:
    box = page.locator(f"#{elem_id} input")
    box.fill(value)
    box.press("Tab")


def add_reward(page: Page, option: str, field: str, value: str, listed: str) -> None:
    """Choose a reward type in the builder, fill its field, Add, and see it listed."""
    page.locator("#train-reward-type input").click()
    page.get_by_role("option", name=option).click()
    box = page.locator(f"#train-reward-{field}").locator("input, textarea").first
    box.fill(value)
    box.press("Tab")
    page.locator("#train-reward-add").click()
    expect(page.locator("#train-rewards")).to_contain_text(listed, timeout=WAIT_MS)


@pytest.mark.browser
@pytest.mark.slow
def test_grpo_with_two_rewards_shows_the_reward_curves(page: Page, app_server, no_trainer_left):
    assert (bundled_model_path() / "config.json").is_file(), (
        "the bundled model is missing; build it with python scripts/build_bundled_model.py"
    )
    page.get_by_role("button", name="Use the example data").click()
    expect(page.locator("#data-summary")).to_contain_text("example_tickets", timeout=WAIT_MS)
    page.get_by_role("tab", name="Mapping").click()
    page.locator("#mapping-kind").get_by_text("Prompts for RL (GRPO)").click()
    page.locator("#mapping-prompt textarea").fill("{subject}\n\n{body}")
    page.locator("#mapping-reference textarea").fill("reply")
    expect(page.locator("#mapping-preview span.df-reference").first).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("#mapping-code")).to_contain_text(".map_prompts(")

    page.get_by_role("tab", name="Train").click()
    page.locator("#train-method").get_by_text("GRPO:").click()
    expect(page.locator("#train-reinforceargs-group_size input")).to_be_visible()
    expect(page.locator("#train-code")).to_contain_text("Add a reward", timeout=WAIT_MS)
    add_reward(page, "regex: matches a pattern", "pattern", "[Rr]eset|[Rr]estart", "regex")
    add_reward(page, "length: within a character budget", "max_chars", "200", "length")
    for elem_id, value in SETTINGS.items():
        fill_number(page, f"train-{elem_id}", value)
    code = page.locator("#train-code")
    expect(code).to_contain_text('dragon.reward("length", max_chars=200)', timeout=WAIT_MS)
    expect(code).to_contain_text("max_new_tokens=16")
    expect(code).to_contain_text("max_steps=3")
    page.locator("#train-start").click()
    expect(page.locator("#train-started")).to_contain_text("Started run", timeout=WAIT_MS)
    run_id = page.locator("#train-started code").inner_text()
    expect(code).to_contain_text("dragon.reinforce(")

    page.get_by_role("tab", name="Monitor").click()
    expect(page.locator("#monitor-header")).to_contain_text(run_id, timeout=WAIT_MS)
    expect(page.locator("#monitor-header")).to_contain_text("GRPO")
    wait_for_points(page, "reward (total)", TRAINER_START_S)
    assert trace_points(page, "regex reward") > 0 and trace_points(page, "length reward") > 0
    expect(page.locator("#monitor-header")).to_contain_text("succeeded", timeout=120_000)
    config = dragon.open_run(app_server[1] / run_id).config
    assert [r["type"] for r in config["method_args"]["rewards"]] == ["regex", "length"]
    assert config["method_args"]["group_size"] == 2

    # The finished run's held-out rewards, beside those of the model it started from.
    page.get_by_role("tab", name="Evaluate").click()
    page.locator("#evaluate-run input").click()
    page.get_by_role("option", name=run_id, exact=False).click()
    page.locator("#evaluate-go").click()
    expect(page.locator("#evaluate-summary")).to_contain_text(run_id, timeout=WAIT_MS)
    expect(page.locator("#evaluate-results")).to_contain_text("mean reward (total)")
    expect(page.locator("#evaluate-results")).to_contain_text("model it started from")
    expect(page.locator("#evaluate-code")).to_contain_text("dragon.evaluate(")
