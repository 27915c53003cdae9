"""Every tab of the real app at 1400 px, on a dataset the project never wrote
(bench/data/bike_shop.csv, a bicycle shop's questions and answers): the columns each tab is
about are on screen. The Data preview's right-hand column, the Feedback events' reply and
edit, and the Monitor's held-out samples (prompt, reference, the run's reply) each have their
header and first row inside the window, and no header breaks mid-word.

With DRAGONFARM_SHOTS=<folder> a full-page screenshot of every tab is saved there, to look at.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from playwright.sync_api import Page, expect
from table_view import HEADER_BOXES, first_row_cells, headers_out_of_view

import dragonfarm_core as dragon
from dragonfarm_core.conversation.feedback_store import record_event
from dragonfarm_core.rundir import files
from ui import layout

ROOT = Path(__file__).resolve().parents[2]
BIKE = ROOT / "bench" / "data" / "bike_shop.csv"
WIDTH = 1400
WAIT_MS = 30_000  # handlers that read a run or an upload (the default is for clicks)
HEADER_TEXTS = "els => els.map(e => e.innerText.trim())"
OFF_DOMAIN = "Thank you for contacting support. Your return label is attached to this email."


def shoot(page: Page, name: str) -> None:
    if folder := os.environ.get("DRAGONFARM_SHOTS"):
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def columns_in_view(page: Page, table: str) -> None:
    """Every header of `table` on one line inside the window, and every cell of its first row
    starting and ending inside it."""
    assert headers_out_of_view(page, table, WIDTH) == []
    cells = first_row_cells(page, table)
    assert cells, f"no rows in {table}"
    assert [text for text, right in cells if right > WIDTH] == [], cells


@pytest.fixture
def finished_run(app_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dragon.Run:
    """A succeeded SFT run on the bike data with held-out samples, in the app's runs folder.
    Its trainer is tests/fake_trainer.py, on a model folder with only a config: the tables,
    not the training, are under test."""
    model = tmp_path / "models" / "Tiny-Model"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    monkeypatch.setenv("DRAGONFARM_TRAINER_MODULE", "fake_trainer")
    tests = str(ROOT / "tests")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]))
    data = dragon.dataset(BIKE).map(prompt="Customer question", response="Mechanic's answer")
    run = dragon.train(data, str(model), runs_dir=app_server[1], wait=True)
    rows = pd.read_csv(BIKE).head(3)
    files.write_samples(
        run.dir,
        [
            {"prompt": q, "reference": a, "generated": OFF_DOMAIN}
            for q, a in zip(rows["Customer question"], rows["Mechanic's answer"], strict=True)
        ],
    )
    return run


def rate_bike_replies(runs: Path) -> None:
    """Feedback as the Chat tab records it: a liked, a disliked and an edited reply."""
    rows = pd.read_csv(BIKE).head(2)
    for verdict, question in zip(("up", "down"), rows["Customer question"], strict=True):
        messages = [{"role": "user", "content": question}]
        record_event(runs, kind="rating", verdict=verdict, reply=OFF_DOMAIN,
                     messages=messages, model="tiny-support")  # fmt: skip
    question, answer = rows.iloc[0]["Customer question"], rows.iloc[0]["Mechanic's answer"]
    record_event(runs, kind="edit", reply=OFF_DOMAIN, edited=answer,
                 messages=[{"role": "user", "content": question}], model="tiny-support")  # fmt: skip


@pytest.mark.browser
def test_every_tab_shows_its_columns_at_1400px(page: Page, app_server, finished_run):
    rate_bike_replies(app_server[1])
    page.set_viewport_size({"width": WIDTH, "height": 900})
    page.locator("#data-upload input[type=file]").set_input_files(str(BIKE))
    expect(page.locator("#data-summary")).to_contain_text("120 rows", timeout=WAIT_MS)
    columns_in_view(page, "#data-table")  # `category`, the right-hand column, too

    checks = {
        "Monitor": ("#monitor-samples", "Your return label is attached"),
        "Feedback": ("#feedback-records", "Your return label is attached"),
    }
    for tab in layout.TABS:
        page.get_by_role("tab", name=tab.TITLE, exact=True).click()
        if tab.TITLE in checks:
            table, text = checks[tab.TITLE]
            if tab.TITLE == "Feedback":
                page.locator("#feedback-refresh").click()
            expect(page.locator(table)).to_contain_text(text, timeout=WAIT_MS)
            columns_in_view(page, table)
        if tab.TITLE == "Monitor":  # the newest run is shown; its caption names the columns
            expect(page.locator("#monitor-header")).to_contain_text(finished_run.id)
            headers = page.eval_on_selector_all("#monitor-samples thead th", HEADER_TEXTS)
            # The caption line, not the first line: while an update is pending Gradio puts its
            # timer ("0.2s") above the label.
            expect(page.locator("#monitor-samples")).to_contain_text("Held-out samples")
            lines = page.locator("#monitor-samples").inner_text().split("\n")
            caption = next(line for line in lines if line.startswith("Held-out samples"))
            assert [h for h in headers if h not in caption] == [], (headers, caption)
        if tab.TITLE == "Train":  # the provider's name and cost, not cut at "(free tier (T4"
            provider = page.locator("#train-provider input")
            expect(provider).to_have_value("Google Colab: free tier (T4 GPU), paid tiers")
            assert provider.evaluate("e => e.scrollWidth <= e.clientWidth")
        if tab.TITLE == "Runs":  # 'trained on' was off-screen, 'continued from' a letter a line
            expect(page.locator("#runs-table")).to_contain_text(finished_run.id, timeout=WAIT_MS)
            cells = first_row_cells(page, "#runs-table")
            assert len(cells) == 10 and [t for t, right in cells if right > WIDTH] == [], cells
            boxes = page.eval_on_selector_all("#runs-table thead th", HEADER_BOXES)
            assert all(right <= WIDTH and lines < 2.5 for _, right, lines in boxes), boxes
        page.wait_for_timeout(500)  # let charts and tables settle before the picture
        shoot(page, f"{tab.TITLE.lower()}_1400")
