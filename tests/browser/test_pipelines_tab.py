"""Drive the Pipelines tab end to end: build a three-step pipeline (three chained training
steps on the example data), start it, watch the timeline advance, reload the page mid-way and
see the same state from the record, then open Compare and see two of its runs' curves.

The app runs with the fake trainer (tests/fake_trainer.py, slowed down so the pipeline is
still going when the page reloads): the tab is what is tested here, not the training.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

import dragonfarm_core as dragon
from tests.browser.conftest import example_mapped, serve_app

TESTS_DIR = Path(__file__).resolve().parents[1]
# 20 logged steps of 0.4 s: each run takes about 8 s, the pipeline about half a minute.
FAKE = {"FAKE_TRAINER_STEPS": "20", "FAKE_TRAINER_STEP_S": "0.4", "FAKE_TRAINER_SAVE_EVERY": "5"}
WAIT_MS = 30_000
PIPELINE_MS = 120_000
STATE = re.compile(r"[·▶✓✗■] (pending|running|succeeded|failed|cancelled)")
SECOND_RUNNING = re.compile(r"✓ succeeded[\s\S]*▶ running[\s\S]*· pending")
TRACES = """(selector) => {
    const plot = document.querySelector(selector + ' .js-plotly-plot');
    return plot && plot.data ? plot.data.filter(t => t.x && t.x.length).map(t => t.name) : [];
}"""


@pytest.fixture(scope="module")
def app_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(url, runs folder) of the app started as a person starts it, its trainers the fake one."""
    path = os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])
    env = {**FAKE, "DRAGONFARM_TRAINER_MODULE": "fake_trainer", "PYTHONPATH": path}
    yield from serve_app(tmp_path_factory.mktemp("runs"), env)


def timeline_states(page: Page) -> list[str]:
    """The timeline's states in step order, as the page shows them ("✓ succeeded", ...)."""
    return [m.group(0) for m in STATE.finditer(page.locator("#pipe-timeline").inner_text())]


def pick_run(page: Page, run_id: str) -> None:
    page.locator("#compare-runs input").click()
    page.get_by_role("option", name=run_id, exact=False).click()


@pytest.mark.browser
@pytest.mark.slow
def test_build_start_watch_reload_and_compare(page: Page, app_server, no_trainer_left):
    example_mapped(page)
    page.get_by_role("tab", name="Pipelines").click()
    for n in (1, 2, 3):
        page.locator("#pipe-add").click()
        expect(page.locator("#pipe-steps")).to_contain_text(f"{n}. train", timeout=WAIT_MS)
    expect(page.locator("#pipe-check")).to_contain_text("Ready: 3 steps.")
    page.locator("#pipe-name textarea, #pipe-name input").first.fill("browser")
    page.locator("#pipe-start").click()
    expect(page.locator("#pipe-started")).to_contain_text("Started pipeline", timeout=WAIT_MS)
    pipeline_id = page.locator("#pipe-started code").inner_text()
    expect(page.locator("#pipe-header")).to_contain_text(pipeline_id, timeout=WAIT_MS)

    # The timeline advances: the first step done while the second trains.
    expect(page.locator("#pipe-timeline")).to_contain_text(SECOND_RUNNING, timeout=PIPELINE_MS)
    before = timeline_states(page)
    assert before[0] == "✓ succeeded" and before[2] == "· pending"

    # A reload starts a fresh session: the page reattaches to the pipeline from its record.
    page.reload()
    page.get_by_role("tab", name="Pipelines").click()
    expect(page.locator("#pipe-header")).to_contain_text(pipeline_id, timeout=WAIT_MS)
    after = timeline_states(page)
    assert after[0] == "✓ succeeded" and after[2] in ("· pending", "▶ running")
    record = dragon.pipeline_status(pipeline_id, runs_dir=app_server[1])
    assert record["status"] == "running"  # the page's state is the record's

    expect(page.locator("#pipe-header")).to_contain_text("succeeded", timeout=PIPELINE_MS)
    assert timeline_states(page) == ["✓ succeeded"] * 3
    expect(page.locator("#pipe-code")).to_contain_text("dragon.pipeline(")
    record = dragon.pipeline_status(pipeline_id, runs_dir=app_server[1])
    first, second = (step["run"] for step in record["steps"][:2])

    page.get_by_role("tab", name="Compare").click()
    pick_run(page, first)
    pick_run(page, second)
    page.keyboard.press("Escape")
    page.wait_for_function(f"() => ({TRACES})('#compare-chart').length >= 2", timeout=WAIT_MS)
    names = page.evaluate(TRACES, "#compare-chart")
    assert first in names and second in names
