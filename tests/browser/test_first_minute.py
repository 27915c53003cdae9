"""A newcomer's first minutes, in the real app with the real trainer: the app opens with the
example mapped, the Train tab holds the settings recommended for the bundled model and says so,
Start with nothing changed, on to the Monitor, and when the run succeeds the Monitor says in
plain words how much the held-out loss fell and shows replies from before and after the run.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

import dragonfarm_core as dragon
from dragonfarm_core.models import bundled_model_path
from dragonfarm_core.rundir import files
from tests.browser.conftest import example_mapped

WAIT_MS = 30_000
RUN_MS = 900_000  # the whole run with the recommended settings (about 2 min on a quiet 2-core CPU)


@pytest.mark.browser
@pytest.mark.slow
def test_open_train_with_the_defaults_and_see_what_changed(page: Page, app_server,
                                                           no_trainer_left):  # fmt: skip
    assert (bundled_model_path() / "config.json").is_file(), "the bundled model is missing"
    example_mapped(page, WAIT_MS)
    page.get_by_role("tab", name="Train").click()
    fits = dragon.recommended(dragon.BUNDLED_MODEL_ID)
    expect(page.locator("#train-recommended")).to_contain_text("Recommended for the bundled model")
    rate = page.locator("#train-trainargs-learning_rate input")
    assert float(rate.input_value()) == fits.args.learning_rate
    expect(page.locator("#train-code")).to_contain_text("dragon.train(", timeout=WAIT_MS)
    expect(page.locator("#train-code")).not_to_contain_text("args=")  # nothing set: recommended

    page.locator("#train-start").click()
    expect(page.locator("#train-started")).to_contain_text("Started run", timeout=WAIT_MS)
    run_id = page.locator("#train-started code").inner_text()
    page.locator("#train-open-monitor").click()  # the way on, offered after Start
    expect(page.locator("#monitor-header")).to_contain_text(run_id, timeout=WAIT_MS)
    expect(page.locator("#monitor-header")).to_contain_text("succeeded", timeout=RUN_MS)

    outcome = page.locator("#monitor-outcome")
    expect(outcome).to_contain_text("Held-out loss went from", timeout=WAIT_MS)
    expect(outcome).to_contain_text("lower")
    expect(outcome.locator(".outcome-card").first).to_contain_text("Before this run")
    expect(page.locator("#monitor-header")).not_to_contain_text("Final:")
    ev = files.read_eval(app_server[1] / run_id)
    assert ev["eval_loss"] < ev["start_eval_loss"]
    config = files.read_config(app_server[1] / run_id)
    assert config["args"]["learning_rate"] == fits.args.learning_rate
    assert config["args"]["epochs"] == fits.args.epochs
