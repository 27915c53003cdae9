"""Drive the real app: upload a CSV, map it with a template and a column chip, see the preview.

With DRAGONFARM_SCREENSHOT=1 the successful run saves docs/screenshot.png for the README.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from playwright.sync_api import expect
from table_view import headers_out_of_view

ROOT = Path(__file__).resolve().parents[2]
ROWS = [
    {"question": "How do I reset my router?", "topic": "network", "answer": "Hold the reset pin for ten seconds, then wait for the light to turn green."},
    {"question": "Why is my bill higher this month?", "topic": "billing", "answer": "Your discount ended on the 1st; you can renew it under Account > Offers."},
    {"question": "Can I pause my subscription?", "topic": "account", "answer": "Yes, for up to three months: Account > Subscription > Pause."},
]  # fmt: skip


@pytest.mark.browser
def test_upload_map_and_preview(page, app_server, tmp_path: Path):
    csv = tmp_path / "faq.csv"
    pd.DataFrame(ROWS).to_csv(csv, index=False)

    page.locator("#data-upload input[type=file]").set_input_files(str(csv))
    expect(page.locator("#data-summary")).to_contain_text("3 rows")
    expect(page.locator("#data-table")).to_contain_text("How do I reset my router?")
    expect(page.locator("#data-code")).to_contain_text("dragon.dataset(")
    assert (app_server[1] / "uploads" / "faq.csv").is_file()

    page.get_by_role("tab", name="Mapping").click()
    page.locator("#mapping-prompt textarea").fill("{question} ({topic})")
    # The response comes from a column chip: focus the slot, click the chip.
    page.locator("#mapping-response textarea").click()
    expect(page.locator("#mapping-target input[value=response]")).to_be_checked()
    page.locator("#mapping-chips").get_by_text("answer", exact=True).click()
    expect(page.locator("#mapping-response textarea")).to_have_value("{answer}")

    learned = page.locator("#mapping-preview span.df-learned").first
    expect(learned).to_be_visible()
    expect(learned).to_contain_text("Hold the reset pin for ten seconds")
    masked = page.locator("#mapping-preview span.df-masked").first
    expect(masked).to_contain_text("How do I reset my router? (network)")
    expect(page.locator("#mapping-preview")).to_contain_text("masked (context)")
    code = page.locator("#mapping-code")
    expect(code).to_contain_text("dragon.dataset(")
    expect(code).to_contain_text('.map(prompt="{question} ({topic})", response="{answer}")')
    expect(page.locator("#mapping-report")).to_contain_text("3 (3 usable)")

    if os.environ.get("DRAGONFARM_SCREENSHOT") == "1":
        page.screenshot(path=str(ROOT / "docs" / "screenshot.png"), full_page=True)


@pytest.mark.browser
def test_bad_upload_shows_an_error_and_keeps_the_data(page, tmp_path: Path):
    page.get_by_role("button", name="Use the example data").click()
    expect(page.locator("#data-summary")).to_contain_text("example_tickets")
    bad = tmp_path / "broken.jsonl"
    bad.write_text('{"question": "fine"}\n{"question": oops\n')
    page.locator("#data-upload input[type=file]").set_input_files(str(bad))
    expect(page.locator("#data-error .df-error")).to_contain_text("broken.jsonl")
    expect(page.locator("#data-summary")).to_contain_text("example_tickets")  # still loaded


@pytest.mark.browser
def test_the_runs_folder_is_never_served(app_server, tmp_path: Path):
    url, runs = app_server
    secret = runs / "uploads" / "secret.csv"
    secret.write_text("question,answer\nkey?,hunter2\n")
    for route in ("gradio_api/file=", "file="):
        try:
            with urllib.request.urlopen(f"{url}/{route}{secret}", timeout=5) as response:
                assert b"hunter2" not in response.read()
        except urllib.error.HTTPError as e:
            assert e.code in (403, 404)


WIDE = [
    {"ticket_id": f"IT-{1000 + i}", "requester_department": "Finance", "category": "network",
     "subject": "VPN authentication failed",
     "description": "My laptop cannot connect to the VPN since this morning; the client says "
                    "'authentication failed' although my password works on the intranet.",
     "resolution_summary": "Reset the token in the portal, then reconnect. " * 3,
     "duration_minutes": str(30 + i)}
    for i in range(4)
]  # fmt: skip


@pytest.mark.browser
def test_wide_data_fits_1400px_and_a_bad_upload_keeps_it_once(page, tmp_path: Path):
    page.set_viewport_size({"width": 1400, "height": 900})
    wide = tmp_path / "helpdesk.csv"
    pd.DataFrame(WIDE).to_csv(wide, index=False)
    page.locator("#data-upload input[type=file]").set_input_files(str(wide))
    expect(page.locator("#data-table")).to_contain_text("IT-1003")
    # Every column, the right-hand ones too, is on screen, and no header breaks mid-word.
    assert headers_out_of_view(page, "#data-table", 1400) == []
    expect(page.locator("#data-report")).not_to_contain_text("tokenizer.json")
    assert page.locator("#data-report thead th").first.inner_text().strip() == "measure"
    expect(page.locator("#data-active")).to_contain_text("helpdesk.csv · 4 rows")
    # The code panel's pale syntax colours are darkened by the app's CSS (ui/layout.py).
    code_filter = "e => getComputedStyle(e).filter"
    assert page.eval_on_selector("#data-code .cm-content", code_filter).startswith("brightness")

    # An empty file after it: one message (no toast), naming the file as uploaded, and the
    # old dataset stays active on every tab that uses it.
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    page.locator("#data-upload").get_by_label("Clear").click()
    page.locator("#data-upload input[type=file]").set_input_files(str(empty))
    error = page.locator("#data-error .df-error")
    expect(error).to_contain_text("empty.csv is empty")
    expect(error).to_contain_text("Kept helpdesk.csv (4 rows) as the active dataset.")
    expect(error).not_to_contain_text("uploads")
    expect(page.locator(".toast-body")).to_have_count(0)
    # The upload box empties (its file is not the active one), ready for the next file.
    expect(page.locator("#data-upload input[type=file]")).to_have_count(1)
    expect(page.locator("#data-table")).to_contain_text("IT-1003")
    for tab, line in (("Mapping", "#mapping-active"), ("Train", "#train-active")):
        page.get_by_role("tab", name=tab).click()
        expect(page.locator(line)).to_contain_text("helpdesk.csv · 4 rows")
