"""Drive the real app through a run trained elsewhere: bundle it from the Train tab with "Run
elsewhere", train the bundle with its own notebook (executed here by nbclient, on the CPU, as
Colab would run it), see a hostile results zip refused in the Monitor tab, import the real one
there, and chat with the imported run.
"""

from __future__ import annotations

import re
import shutil
import zipfile
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from results_fakes import run_notebook

import dragonfarm_core as dragon
from dragonfarm_core.models import bundled_model_path
from tests.browser.conftest import example_mapped, set_train_args

SETTINGS = {"max_steps": "2", "logging_steps": "1", "batch_size": "2", "grad_accum": "1",
            "max_seq_len": "256"}  # fmt: skip
WAIT_MS = 30_000
REPLY_MS = 180_000  # the first reply starts the worker: it imports torch and loads the model


def upload(page: Page, button: str, path: Path) -> None:
    with page.expect_file_chooser() as chooser:
        page.locator(button).click()
    chooser.value.set_files(str(path))


def hostile_copy(results: Path, folder: Path) -> Path:
    """The real results with a zip-slip member added."""
    bad = folder / results.name
    shutil.copy(results, bad)
    with zipfile.ZipFile(bad, "a") as z:
        z.writestr("../../escape.py", "print('owned')")
    return bad


def bundle_from_train(page: Page) -> str:
    """From the example data the app opens with, set a two-step run, click Run elsewhere;
    -> the run's id."""
    example_mapped(page, WAIT_MS)
    page.get_by_role("tab", name="Train").click()
    set_train_args(page, SETTINGS, WAIT_MS)
    page.locator("#train-elsewhere").click()
    steps = page.locator("#train-elsewhere-steps")
    expect(steps).to_contain_text("Bundled run", timeout=60_000)
    expect(steps.locator("a[href='https://colab.research.google.com/']")).to_be_visible()
    expect(steps).to_contain_text("Runtime > Change runtime type")
    run_id = steps.locator("code").first.inner_text()
    downloads = page.locator("#train-bundle-files")
    expect(downloads.locator(f"a[href$='/dragonfarm-{run_id}.zip']")).to_be_visible()
    expect(downloads.locator(f"a[href$='/dragonfarm-{run_id}.ipynb']")).to_be_visible()
    expect(page.locator("#train-code")).to_contain_text("dragon.bundle(")
    return run_id


def import_in_monitor(page: Page, run: dragon.Run, results: Path, tmp_path: Path) -> None:
    """A hostile copy of the results is refused on the page, then the real ones import."""
    page.get_by_role("tab", name="Monitor").click()
    header = page.locator("#monitor-header")
    expect(header).to_contain_text(run.id, timeout=WAIT_MS)
    expect(header).to_contain_text("bundled")
    upload(page, "#monitor-import", hostile_copy(results, tmp_path))
    message = page.locator("#monitor-import-message")
    expect(message).to_contain_text("Import refused", timeout=WAIT_MS)
    expect(message).to_contain_text("'..' part")
    assert run.status()["state"] == "bundled"
    upload(page, "#monitor-import", results)
    expect(message).to_contain_text("Imported the results", timeout=WAIT_MS)
    expect(header).to_contain_text("succeeded", timeout=WAIT_MS)


@pytest.mark.browser
@pytest.mark.slow
def test_bundle_from_train_import_in_monitor_then_chat(page: Page, app_server, tmp_path):
    assert (bundled_model_path() / "config.json").is_file(), (
        "the bundled model is missing; build it with python scripts/build_bundled_model.py"
    )
    run_id = bundle_from_train(page)
    run = dragon.open_run(app_server[1] / run_id)
    assert run.status()["state"] == "bundled" and not (run.dir / "train.log").exists()
    # The GPU machine's part: the bundle's own notebook trains it and zips the results.
    results, _ = run_notebook(run, tmp_path / "work")
    import_in_monitor(page, run, results, tmp_path)

    page.get_by_role("tab", name="Chat").click()
    expect(page.locator("#chat-run input")).to_have_value(re.compile(run_id), timeout=WAIT_MS)
    page.locator("#chat-message textarea").fill("My thermostat keeps dropping off Wi-Fi.")
    page.locator("#chat-send").click()
    expect(page.locator("#chat-code")).to_contain_text("c.say(", timeout=REPLY_MS)
    expect(page.locator("#chat-bot-0 .message-row")).to_have_count(2, timeout=WAIT_MS)
    expect(page.locator("#chat-error")).to_be_empty()
