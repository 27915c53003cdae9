"""Drive a sweep end to end in the browser: on the Train tab choose Sweep, vary the learning
rate over three values, start it, watch its trials finish, then pick it in Compare and see
the trials ranked with the best marked and Optuna's two plots drawn.

The app runs with the fake trainer, which logs a held-out loss set by the learning rate (best
at 3e-4): the tabs are what is tested here, not the training.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

import dragonfarm_core as dragon
from tests.browser.conftest import example_mapped, serve_app

TESTS_DIR = Path(__file__).resolve().parents[1]
FAKE = {"FAKE_TRAINER_STEPS": "4", "FAKE_TRAINER_STEP_S": "0.3", "FAKE_TRAINER_EVAL": "1"}
WAIT_MS = 30_000
SWEEP_MS = 180_000
TRACES = """(selector) => {
    const plot = document.querySelector(selector + ' .js-plotly-plot');
    return plot && plot.data ? plot.data.length : 0;
}"""


@pytest.fixture(scope="module")
def app_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(url, runs folder) of the app started as a person starts it, its trainers the fake one."""
    path = os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])
    env = {**FAKE, "DRAGONFARM_TRAINER_MODULE": "fake_trainer", "PYTHONPATH": path}
    yield from serve_app(tmp_path_factory.mktemp("runs"), env)


@pytest.fixture
def no_sweep_left(app_server) -> Iterator[None]:
    """A sweep runs as its own job and outlives the app: stop any this test left going."""
    yield
    for row in dragon.list_sweeps(app_server[1]):
        if row["status"] in ("queued", "running"):
            dragon.sweep_cancel(row["path"], timeout=20)


def fill(page: Page, elem_id: str, text: str) -> None:
    box = page.locator(f"#{elem_id} input, #{elem_id} textarea").first
    box.fill(text)
    box.press("Tab")


@pytest.mark.browser
@pytest.mark.slow
def test_a_sweep_from_the_train_tab_is_ranked_in_compare(page: Page, app_server, no_sweep_left,
                                                         no_trainer_left):  # fmt: skip
    example_mapped(page)
    page.get_by_role("tab", name="Train").click()
    page.locator("#train-mode").get_by_text("Sweep", exact=True).click()
    expect(page.locator("#sweep-start")).to_be_visible()
    expect(page.locator("#train-start")).to_be_hidden()
    fill(page, "sweep-values-0", "3e-3, 3e-4, 3e-2")
    fill(page, "sweep-values-1", "16")
    code = page.locator("#sweep-code")
    expect(code).to_contain_text('"learning_rate": [0.003, 0.0003, 0.03]', timeout=WAIT_MS)
    expect(code).to_contain_text("dragon.sweep(spec, space")

    page.locator("#sweep-start").click()
    expect(page.locator("#sweep-started")).to_contain_text("Started sweep", timeout=WAIT_MS)
    sweep_id = page.locator("#sweep-started code").inner_text()
    expect(page.locator("#sweep-header")).to_contain_text(sweep_id, timeout=WAIT_MS)
    expect(page.locator("#sweep-header")).to_contain_text("succeeded", timeout=SWEEP_MS)
    expect(page.locator("#sweep-header")).to_contain_text("3 of 3 trials done")
    expect(page.locator("#sweep-trials")).to_contain_text("★")
    expect(code).to_contain_text("best = s.best_run")  # dragon.code(sweep) of the one started
    record = dragon.sweep_status(sweep_id, runs_dir=app_server[1])
    best = next(t for t in record["trials"] if t["number"] == record["best"])
    assert best["params"]["args.learning_rate"] == 3e-4

    page.get_by_role("tab", name="Compare").click()
    page.locator("#compare-sweep input").click()
    page.get_by_role("option", name=sweep_id, exact=False).click()
    ranked = page.locator("#compare-ranked")
    expect(ranked).to_contain_text("★ 1", timeout=WAIT_MS)
    first_row = ranked.locator("tbody tr").first
    expect(first_row).to_contain_text("0.0003")
    expect(page.locator("#compare-sweep-note")).to_contain_text("marks the best")
    for plot in ("#compare-importance", "#compare-parallel"):
        page.wait_for_function(f"() => ({TRACES})('{plot}') > 0", timeout=WAIT_MS)
    expect(page.locator("#compare-code")).to_contain_text("optuna.load_study(")
