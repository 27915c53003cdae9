"""Drive the real app end to end: example data, a mapping, SFT of the bundled model with the
real trainer, the loss chart gaining points in the Monitor tab, Cancel, and a second browser
seeing the same cancelled run.
"""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import Page, expect

from dragonfarm_core.models import bundled_model_path
from tests.browser.conftest import example_mapped, set_train_args

# The figure's points as the browser holds them (plotly keeps the traces on its graph div).
LOSS_POINTS = """() => {
    const plot = document.querySelector('#monitor-chart .js-plotly-plot');
    return plot && plot.data && plot.data.length ? plot.data[0].x.length : 0;
}"""
# 400 steps so the run is still going when Cancel is clicked on any machine; the test cancels
# it after a few logged steps.
SETTINGS = {"max_steps": "400", "logging_steps": "1", "batch_size": "2", "grad_accum": "1",
            "max_seq_len": "256", "save_steps": "1000"}  # fmt: skip
TRAINER_START_S = 60  # the trainer imports torch and loads the model before its first step
WAIT_MS = 30_000  # for handlers that read or write a run (the default 5 s is for clicks)


def loss_points(page: Page) -> int:
    return page.evaluate(LOSS_POINTS)


def wait_for_points(page: Page, more_than: int, timeout: float) -> int:
    end = time.monotonic() + timeout
    while (n := loss_points(page)) <= more_than:
        assert time.monotonic() < end, f"the loss chart stayed at {n} points for {timeout} s"
        time.sleep(0.25)
    return n


@pytest.mark.browser
@pytest.mark.slow
def test_train_watch_the_loss_and_cancel(page: Page, browser, app_server, no_trainer_left):
    assert (bundled_model_path() / "config.json").is_file(), (
        "the bundled model is missing; build it with python scripts/build_bundled_model.py"
    )
    example_mapped(page, WAIT_MS)  # what the app opens with

    page.get_by_role("tab", name="Train").click()
    expect(page.locator("#train-model")).to_contain_text("dragonfarm/tiny-support")
    set_train_args(page, SETTINGS, WAIT_MS)
    page.locator("#train-start").click()
    expect(page.locator("#train-started")).to_contain_text("Started run", timeout=WAIT_MS)
    run_id = page.locator("#train-started code").inner_text()
    expect(page.locator("#train-code")).to_contain_text("dragon.train(")

    page.get_by_role("tab", name="Monitor").click()
    expect(page.locator("#monitor-header")).to_contain_text(run_id, timeout=WAIT_MS)
    first = wait_for_points(page, 0, TRAINER_START_S)
    later = wait_for_points(page, first, 30)  # the chart keeps growing as steps are logged
    assert later > first
    expect(page.locator("#monitor-progress")).to_contain_text(" / 400", timeout=WAIT_MS)

    page.locator("#monitor-cancel").click()
    expect(page.locator("#monitor-header")).to_contain_text("cancelled", timeout=60_000)
    expect(page.locator("#monitor-resume")).to_be_enabled(timeout=WAIT_MS)
    assert loss_points(page) >= later  # the history stays on the chart
    runs = app_server[1]
    assert (runs / run_id / "checkpoints").is_dir()  # cancel keeps the work

    # A second browser, opened fresh, shows the same run from its files.
    other = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        second = other.new_page()
        second.goto(app_server[0])
        second.get_by_role("tab", name="Monitor").click()
        expect(second.locator("#monitor-header")).to_contain_text(run_id, timeout=WAIT_MS)
        expect(second.locator("#monitor-header")).to_contain_text("cancelled")
        wait_for_points(second, later - 1, 30)  # the chart is drawn just after the header
    finally:
        other.close()
