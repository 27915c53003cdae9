"""Browser-test fixtures: the real app in a subprocess, and Debian's Chromium through Playwright.

The app runs exactly as a person starts it (`python app.py`), on a free 127.0.0.1 port with a
fresh runs folder, so these tests see what a person sees, uploads and all.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

import dragonfarm_core as dragon

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
START_TIMEOUT_S = 60
# Playwright's `expect` waits 5 s unless told otherwise, and `page.set_default_timeout` does not
# reach it. CI shares two cores with whatever else runs: a bad upload's error once took longer
# than 5 s to appear there (the example data's report was still being computed). Wait as long
# as a page action does.
EXPECT_TIMEOUT_MS = 15_000
expect.set_options(timeout=EXPECT_TIMEOUT_MS)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_answering(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the app exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.3)
    pytest.fail(f"the app did not answer within {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


def example_mapped(page, timeout_ms: int = 30_000) -> None:
    """The first minute: the app opens with the example tickets loaded and mapped for SFT
    (`{subject}\n\n{body}` -> `reply`, as the README maps them), which the Mapping tab shows
    with its preview; the tests that train start from there."""
    expect(page.locator("#data-summary")).to_contain_text("example_tickets", timeout=timeout_ms)
    page.get_by_role("tab", name="Mapping").click()
    prompt = page.locator("#mapping-prompt textarea")
    expect(prompt).to_have_value("{subject}\n\n{body}", timeout=timeout_ms)
    expect(page.locator("#mapping-response textarea")).to_have_value("reply")
    expect(page.locator("#mapping-note")).to_contain_text("Mapped like the README")
    learned = page.locator("#mapping-preview span.df-learned").first
    expect(learned).to_be_visible(timeout=timeout_ms)


def set_train_args(page, settings: dict[str, str], timeout_ms: int = 30_000) -> None:
    """Fill the Train tab's TrainArgs boxes (`name` -> value) and wait until the code panel
    shows every one. Previews replayed after that change nothing (`train.preview_changed`), so
    the code a click writes next stays."""
    for name, value in settings.items():
        box = page.locator(f"#train-trainargs-{name} input")
        box.fill(value)
        box.press("Tab")
    for name, value in settings.items():
        expect(page.locator("#train-code")).to_contain_text(f"{name}={value}", timeout=timeout_ms)


@pytest.fixture(scope="session")
def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    return path


@pytest.fixture(scope="module")
def app_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(url, runs folder) of a freshly started app."""
    runs = tmp_path_factory.mktemp("runs")
    # GRADIO_ALLOWED_PATHS tries to expose the runs folder: the app must keep it blocked anyway.
    yield from serve_app(runs, {"GRADIO_ALLOWED_PATHS": str(runs)})


def serve_app(runs: Path, extra_env: dict[str, str]) -> Iterator[tuple[str, Path]]:
    """Start `python app.py` on `runs` with `extra_env` added; yield (url, runs), then stop it."""
    log = runs.parent / "app.log"
    url = f"http://127.0.0.1:{_free_port()}"
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", **extra_env}
    port = url.rsplit(":", 1)[1]
    argv = [sys.executable, "app.py", "--runs-dir", str(runs), "--port", port]
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_until_answering(url, proc, log)
        yield url, runs
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def browser(chromium: str) -> Iterator:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, app_server) -> Iterator:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(EXPECT_TIMEOUT_MS)
    page.goto(app_server[0])
    # The app opens with the example tickets loaded and mapped: wait for that to settle, as a
    # person would see it, so a test's first upload is not overtaken by it.
    expect(page.locator("#data-active")).to_contain_text("mapped as", timeout=30_000)
    yield page
    context.close()


@pytest.fixture
def no_trainer_left(app_server) -> Iterator[None]:
    """Trainers run in their own session and outlive the app: stop any this test left going."""
    yield
    for run in dragon.runs(app_server[1]).itertuples():
        if run.state in ("queued", "running"):
            dragon.cancel(app_server[1] / run.id, timeout=10)
