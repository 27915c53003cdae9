"""The lab app's own login page in a real browser: `python app.py --profile lab` opens on a
login form (no Gradio page, nothing of the API); a wrong password says so and stays there; the
right one opens the app, whose header names the lab profile and has a Log out button (a POST)
that leads back to the form.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import serve_app
from playwright.sync_api import expect

from dragonfarm_core.auth import users

PASSWORD = "alice-password-123"


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("lab")
    users.add_user(root / users.USERS_FILE, "alice", PASSWORD)
    env = {"DRAGONFARM_PROFILE": "lab", "DRAGONFARM_LAB_ROOT": str(root)}
    yield from serve_app(root, env)


@pytest.mark.browser
def test_log_in_with_the_form_then_log_out(browser, lab_server):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(lab_server[0])
    expect(page).to_have_title("dragonfarm: log in")
    assert page.evaluate("typeof window.gradio_api_info") == "undefined"

    page.fill("#username", "alice")
    page.fill("#password", "not her password")
    page.click("button[type=submit]")
    expect(page.locator("#message")).to_contain_text("Incorrect credentials")
    expect(page.locator("#login")).to_be_visible()

    page.fill("#password", PASSWORD)
    page.click("button[type=submit]")
    header = page.locator("#df-runs-dir")
    expect(header).to_contain_text("profile 'lab'", timeout=60_000)
    expect(header).to_contain_text(str(lab_server[1] / "users" / "alice"))
    page.get_by_role("button", name="Log out").click()  # a POST, which the page's Origin passes
    expect(page.locator("#login")).to_be_visible()
    page.goto(lab_server[0])  # logged out for good: the cookie is gone
    expect(page.locator("#login")).to_be_visible()
    context.close()
