"""Drive the real app's Feedback tab at 1400 px: the reply and edit columns are on screen, no
header breaks mid-word, and data built from feedback is named as Train's data."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect
from table_view import headers_out_of_view

from dragonfarm_core.conversation.feedback_store import record_event

PROMPT = (
    "My laptop cannot connect to the VPN since this morning; the client says 'authentication "
    "failed' although my password works on the intranet."
)


@pytest.mark.browser
def test_feedback_columns_fit_1400px_and_train_names_the_built_data(page, app_server):
    runs = app_server[1]
    for verdict in ("up", "down"):
        record_event(runs, kind="rating", verdict=verdict, reply="Reset your token. " * 8,
                     messages=[{"role": "user", "content": PROMPT}], model="tiny-support")  # fmt: skip
    record_event(runs, kind="edit", reply="Try later.", edited="Reset the token, then sign in. " * 6,
                 messages=[{"role": "user", "content": PROMPT}], model="tiny-support")  # fmt: skip
    page.set_viewport_size({"width": 1400, "height": 900})
    page.get_by_role("tab", name="Feedback").click()
    page.locator("#feedback-refresh").click()
    records = page.locator("#feedback-records")
    expect(records).to_contain_text("Reset the token, then sign in.")
    assert headers_out_of_view(page, "#feedback-records", 1400) == []
    edit = records.get_by_text("Reset the token, then sign in.", exact=False).first
    assert edit.bounding_box()["x"] < 1400  # the edit itself, not only its header, is on screen

    page.locator("#feedback-sft").click()
    expect(page.locator("#feedback-built")).to_contain_text("Built the SFT dataset")
    built = page.locator("#feedback-built code").inner_text()  # sft-<time>.jsonl
    page.get_by_role("tab", name="Train").click()
    expect(page.locator("#train-active")).to_contain_text(f"Training data: {built}")
