"""Drive the real app: chat with a run trained for two steps on the bundled model, rate one
reply down, edit another, see both in the Feedback tab, and hand the SFT data to Train.

The run is trained before the page opens (the real trainer, on the CPU); the Chat tab finds it
by itself, and its replies come from the local inference worker the app starts.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from playwright.sync_api import Page, expect

import dragonfarm_core as dragon
from dragonfarm_core.conversation.feedback_store import read_events
from dragonfarm_core.models import bundled_model_path

REPLY_MS = 180_000  # the first reply starts the worker: it imports torch and loads the model
WAIT_MS = 30_000
EDITED = "Restart the thermostat, then re-pair it from the app."


@pytest.fixture(scope="module")
def trained(app_server) -> str:
    """A succeeded run in the app's runs folder: SFT of the bundled model, two steps."""
    assert (bundled_model_path() / "config.json").is_file(), (
        "the bundled model is missing; build it with python scripts/build_bundled_model.py"
    )
    tickets = pd.read_csv(dragon.example_data()).head(16)
    run = dragon.train(
        dragon.dataset(tickets).map(prompt="{subject}\n\n{body}", response="reply"),
        str(bundled_model_path()),
        args=dragon.TrainArgs(max_steps=2, batch_size=2, grad_accum=1, max_seq_len=256,
                              extra={"sample_max_new_tokens": 8}),
        hardware=dragon.Hardware(device="cpu"), n_samples=1, runs_dir=app_server[1], wait=True,
    )  # fmt: skip
    assert run.status()["state"] == "succeeded"
    return run.id


def say(page: Page, text: str, turn: int) -> None:
    page.locator("#chat-message textarea").fill(text)
    page.locator("#chat-send").click()
    # A turn is in the code panel once its reply is complete.
    expect(page.locator("#chat-code")).to_contain_text(f'c.say("{text}")', timeout=REPLY_MS)
    expect(page.locator("#chat-bot-0 .message-row")).to_have_count(2 * turn, timeout=WAIT_MS)


@pytest.mark.browser
@pytest.mark.slow
def test_chat_with_a_trained_run_rate_edit_and_see_the_feedback(
    page: Page, app_server, trained: str
):
    page.get_by_role("tab", name="Chat").click()
    expect(page.locator("#chat-run input")).to_have_value(re.compile(trained), timeout=WAIT_MS)
    page.get_by_text("System prompt and sampling").click()
    max_new = page.locator("#chat-max-new input")
    # The box shows its default once it is mounted; the new value is committed on leaving it
    # (CI sent the default once: a value typed while the accordion was still rendering).
    expect(max_new).to_have_value("256", timeout=WAIT_MS)
    # CI (2026-12-05) saw the box show 256 again after 24 was typed and committed, once, in
    # a clean clone's first browser tests; it never did here in three runs. A person would
    # type it again: so does the test, at most three times (the code panel below checks
    # that 24 is what the reply was asked with).
    for attempt in range(3):
        max_new.fill("24")
        max_new.press("Tab")
        try:
            expect(max_new).to_have_value("24", timeout=3000)
            break
        except AssertionError:
            if attempt == 2:
                raise

    say(page, "My thermostat keeps dropping off Wi-Fi.", 1)
    expect(page.locator("#chat-bot-0")).to_contain_text("My thermostat keeps dropping off Wi-Fi.")
    expect(page.locator("#chat-code")).to_contain_text(f"{trained}")
    expect(page.locator("#chat-code")).to_contain_text("max_new_tokens=24")
    page.locator("#chat-down-0").click()
    expect(page.locator("#chat-notice")).to_contain_text("👎 Bad saved", timeout=WAIT_MS)
    expect(page.locator("#chat-code")).to_contain_text('c.rate("down")')

    say(page, "I tried that. What else?", 2)
    page.locator("#chat-edit-0").click()
    box = page.locator("#chat-edit-box-0 textarea")
    expect(box).to_be_visible(timeout=WAIT_MS)
    assert box.input_value().strip()  # the reply to edit is in the box
    box.fill(EDITED)
    page.locator("#chat-edit-save-0").click()
    expect(page.locator("#chat-notice")).to_contain_text("Edit saved", timeout=WAIT_MS)
    expect(page.locator("#chat-bot-0")).to_contain_text(EDITED)
    expect(box).to_be_hidden()
    expect(page.locator("#chat-error")).to_be_empty()

    page.get_by_role("tab", name="Feedback").click()
    records = page.locator("#feedback-records")
    expect(records).to_contain_text(EDITED, timeout=WAIT_MS)
    expect(records).to_contain_text("👎 bad")
    expect(records).to_contain_text("My thermostat keeps dropping off Wi-Fi.")
    expect(page.locator("#feedback-counts")).to_contain_text("2 feedback events")
    expect(page.locator("#feedback-counts")).to_contain_text("1 SFT row")
    page.locator("#feedback-sft").click()
    expect(page.locator("#feedback-built")).to_contain_text("1 row", timeout=WAIT_MS)
    expect(page.locator("#feedback-code")).to_contain_text("dragon.train(fb.sft, dragon.open_run(")

    # The Train tab now trains on the feedback data.
    page.get_by_role("tab", name="Train").click()
    expect(page.locator("#train-code")).to_contain_text("dragon.conversations(", timeout=WAIT_MS)
    expect(page.locator("#train-code")).to_contain_text("feedback/sft-")
    kinds = [(e["kind"], e["verdict"], e["run"]) for e in read_events(app_server[1])]
    run_dir = str(Path(app_server[1], trained).resolve())
    assert kinds == [("rating", "down", run_dir), ("edit", None, run_dir)]
