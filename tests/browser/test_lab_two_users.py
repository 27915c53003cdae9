"""Two people on one lab workstation: each logs in in their own browser, trains a tiny run of
the bundled model, and sees only their own run in Runs, Monitor, Chat and Compare; both see the
machine's queue (the second run waits for the first: one CPU queue); a browser that has not
logged in gets the login page, and the API answers it 401.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from dragonfarm_core.auth import users
from dragonfarm_core.auth.profiles import USERS_DIR
from dragonfarm_core.models import bundled_model_path
from tests.browser.conftest import serve_app

WAIT_MS = 30_000
TRAIN_MS = 240_000  # the trainer imports torch and loads the model before its first step
# alice's run is long enough that bob's queues behind it; bob's is as short as training gets.
# Both forms are filled before either Start is pressed, so bob's run is queued a moment after
# alice's (CI once saw alice's 40 steps end while bob's form was still being filled).
STEPS = {"alice": "120", "bob": "2"}
FAST = {"logging_steps": "1", "batch_size": "2", "grad_accum": "1", "max_seq_len": "128",
        "save_steps": "1000"}  # fmt: skip


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("lab")
    for name in STEPS:
        users.add_user(root / users.USERS_FILE, name, f"{name}-password-123")
    env = {"DRAGONFARM_PROFILE": "lab", "DRAGONFARM_LAB_ROOT": str(root)}
    yield from serve_app(root, env)


def log_in(browser, url: str, name: str) -> Page:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(url)
    page.locator("#username").fill(name)
    page.locator("#password").fill(f"{name}-password-123")
    page.locator("#login button").click()
    expect(page.locator("#data-active")).to_contain_text("mapped as", timeout=WAIT_MS)
    expect(page.locator("#df-runs-dir")).to_contain_text(f"{USERS_DIR}/{name}", timeout=WAIT_MS)
    return page


def fill_form(page: Page, steps: str) -> None:
    page.get_by_role("tab", name="Train").click()
    for name, value in {"max_steps": steps, **FAST}.items():
        box = page.locator(f"#train-trainargs-{name} input")
        box.fill(value)
        box.press("Tab")
    expect(page.locator("#train-code")).to_contain_text(f"max_steps={steps}", timeout=WAIT_MS)


def start_run(page: Page) -> str:
    page.locator("#train-start").click()
    expect(page.locator("#train-started")).to_contain_text("Started run", timeout=WAIT_MS)
    return page.locator("#train-started code").inner_text()


def options(page: Page, tab: str, elem_id: str, wanted: str) -> str:
    """The texts a picker offers once it lists `wanted`, as a person opening it sees them (its
    focus refreshes the choices, which arrive a moment after the list opens)."""
    page.get_by_role("tab", name=tab).click()
    page.locator(f"#{elem_id} input").first.click()
    listed = page.locator("[role=option]")
    expect(listed.filter(has_text=wanted).first).to_be_attached(timeout=WAIT_MS)
    # The list can re-render once more as the refreshed choices land (CI once read it empty
    # between the two): read it until it holds `wanted`.
    deadline = time.monotonic() + WAIT_MS / 1000
    texts = " | ".join(listed.all_inner_texts())
    while wanted not in texts and time.monotonic() < deadline:
        page.wait_for_timeout(200)
        texts = " | ".join(listed.all_inner_texts())
    page.keyboard.press("Escape")
    return texts


@pytest.mark.browser
@pytest.mark.slow
def test_two_users_see_their_own_runs_and_the_shared_queue(browser, lab_server):
    assert (bundled_model_path() / "config.json").is_file(), "build the bundled model first"
    url, root = lab_server
    pages = {name: log_in(browser, url, name) for name in STEPS}
    for name, steps in STEPS.items():
        fill_form(pages[name], steps)
    runs = {name: start_run(pages[name]) for name in STEPS}

    for page in pages.values():  # both see both runs in the queue, bob's waiting
        page.get_by_role("tab", name="Monitor").click()
        queue = page.locator("#lab-queue")
        expect(queue).to_contain_text("queued #1", timeout=TRAIN_MS)
        expect(queue).to_contain_text("running")
        expect(queue).to_contain_text("alice")
        expect(queue).to_contain_text("bob")

    for name, page in pages.items():
        page.get_by_role("tab", name="Monitor").click()
        expect(page.locator("#monitor-header")).to_contain_text(runs[name], timeout=WAIT_MS)
        expect(page.locator("#monitor-header")).to_contain_text("succeeded", timeout=TRAIN_MS)
    for name, page in pages.items():
        other = runs["bob" if name == "alice" else "alice"]
        page.get_by_role("tab", name="Runs").click()
        expect(page.locator("#runs-table")).to_contain_text(runs[name], timeout=WAIT_MS)
        assert other not in page.locator("#runs-table").inner_text()
        for tab, picker in (("Monitor", "monitor-run"), ("Chat", "chat-run"),
                            ("Compare", "compare-runs")):  # fmt: skip
            offered = options(page, tab, picker, runs[name])
            assert runs[name] in offered and other not in offered, (name, tab, offered)
        assert (root / USERS_DIR / name / runs[name] / "config.json").is_file()

    stranger = browser.new_context()
    try:
        page = stranger.new_page()
        page.goto(url)
        expect(page.locator("#login")).to_be_visible()
        assert stranger.request.get(f"{url}/gradio_api/info").status == 401
        assert stranger.request.get(f"{url}/config").status == 401
    finally:
        stranger.close()
        for page in pages.values():
            page.context.close()
