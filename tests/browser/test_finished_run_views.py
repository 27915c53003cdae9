"""Two finished runs as a person looks at them in Chromium at 1400 px: the Evaluate tab fills its
panel for the run it shows as picked (picked on another tab, or by hand), and Compare shows A's
and B's replies to the same held-out prompts next to the prompt, inside the window.

The runs are trained by tests/fake_trainer.py on a model folder with only a config (the views,
not the training, are under test); each test writes the files a real trainer writes at its end.
With DRAGONFARM_SHOTS=<folder> a screenshot of each view is saved there, to look at.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pandas as pd
import pytest
from playwright.sync_api import Page, expect
from table_view import first_row_cells, headers_out_of_view

import dragonfarm_core as dragon
from dragonfarm_core.rundir import files

ROOT = Path(__file__).resolve().parents[2]
WIDTH = 1400
VIEWPORT = 1280  # the page fixture's window
WAIT_MS = 30_000
PROMPT = "My e-bike's display shows error 21 after riding in the rain. What should I do? " * 3


def shoot(page: Page, name: str) -> None:
    if folder := os.environ.get("DRAGONFARM_SHOTS"):
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


@pytest.fixture(scope="module")
def two_runs(app_server, tmp_path_factory: pytest.TempPathFactory) -> list[dragon.Run]:
    """Two succeeded SFT runs in the app's runs folder, each with an eval.json and samples for
    the same long prompt (a later second each: the app lists runs by id)."""
    base = tmp_path_factory.mktemp("finished")
    model = base / "Tiny-Model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    rows = [{"question": f"Device {i} reboots", "answer": f"Reset it ({i})."} for i in range(24)]
    pd.DataFrame(rows).to_csv(base / "tickets.csv", index=False)
    data = dragon.dataset(base / "tickets.csv").map(prompt="question", response="answer")
    runs = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DRAGONFARM_TRAINER_MODULE", "fake_trainer")
        tests = str(ROOT / "tests")
        mp.setenv("PYTHONPATH", os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]))
        for name, decay in (("first", 0), ("second", 0.0)):
            time.sleep(1.05 - time.time() % 1)
            args = dragon.TrainArgs(weight_decay=decay, max_steps=6)
            run = dragon.train(data, str(model), args=args, runs_dir=app_server[1], name=name,
                               wait=True)  # fmt: skip
            files.write_eval(run.dir, {"eval_loss": 1.25, "perplexity": 3.49, "step": 6})
            files.write_samples(run.dir, [
                {"prompt": PROMPT, "reference": "Dry the display connector.",
                 "generated": f"Reply of the {name} run: unplug the connector and let it dry."}
            ])  # fmt: skip
            runs.append(run)
    return runs


@pytest.mark.browser
def test_evaluate_fills_its_panel_for_the_run_it_shows_as_picked(page: Page, two_runs):
    first, second = two_runs
    # Picked on another tab: Runs -> Open in Monitor selects it everywhere.
    page.get_by_role("tab", name="Runs", exact=True).click()
    page.locator("#runs-chosen input").click()
    page.get_by_role("option", name=first.id, exact=False).click()
    page.locator("#runs-open").click()
    page.get_by_role("tab", name="Evaluate", exact=True).click()
    expect(page.locator("#evaluate-run input")).to_have_value(
        f"{first.id} (sft, succeeded)", timeout=WAIT_MS
    )
    expect(page.locator("#evaluate-summary")).to_contain_text(first.id, timeout=WAIT_MS)
    expect(page.locator("#evaluate-summary")).not_to_contain_text("Pick a finished run")
    expect(page.locator("#evaluate-results")).to_contain_text("3.49")
    expect(page.locator("#evaluate-code")).to_contain_text(f'dragon.evaluate("{first.dir}"')
    expect(page.locator("#judge-summary")).to_contain_text("not been judged yet")
    cells = first_row_cells(page, "#evaluate-samples")  # the replies on screen too
    assert len(cells) == 3 and [t for t, right in cells if right > VIEWPORT] == [], cells
    shoot(page, "evaluate_picked")

    # Picked by hand in the list: the panel follows.
    page.locator("#evaluate-run input").click()
    page.get_by_role("option", name=second.id, exact=False).click()
    expect(page.locator("#evaluate-summary")).to_contain_text(second.id, timeout=WAIT_MS)
    expect(page.locator("#evaluate-code")).to_contain_text(str(second.dir))


@pytest.mark.browser
def test_compare_shows_both_replies_beside_the_prompt(page: Page, two_runs):
    first, second = two_runs
    page.set_viewport_size({"width": WIDTH, "height": 900})
    page.get_by_role("tab", name="Compare", exact=True).click()
    picker = page.locator("#compare-runs input")
    for run in two_runs:  # one at a time: each pick redraws the page below the picker
        picker.click()
        picker.press_sequentially(run.id)  # the list, filtered to this run
        page.get_by_role("option", name=run.id, exact=False).click()
        page.locator("#compare-legend").click()  # away from the picker: its list closes
        expect(page.locator("#compare-table")).to_contain_text(run.id, timeout=WAIT_MS)
    # The toolbar Gradio always shows in the chart's top right was drawn over the legend's
    # names (a 30 px top margin): the legend now sits below it.
    expect(page.locator("#compare-chart .legend")).to_be_visible(timeout=WAIT_MS)
    toolbar = page.locator("#compare-chart .modebar").bounding_box()
    legend = page.locator("#compare-chart .legend").bounding_box()
    assert toolbar and legend and legend["y"] >= toolbar["y"] + toolbar["height"], (toolbar, legend)
    table = "#compare-samples"
    expect(page.locator(table)).to_contain_text("Reply of the second run", timeout=WAIT_MS)
    assert headers_out_of_view(page, table, WIDTH) == []
    cells = first_row_cells(page, table)
    assert len(cells) == 4 and [t for t, right in cells if right > WIDTH] == [], cells
    # weight_decay 0 and 0.0 are the same setting: not listed as a difference.
    expect(page.locator("#compare-diff")).to_contain_text("name")
    expect(page.locator("#compare-diff")).not_to_contain_text("weight_decay")
    page.locator(table).scroll_into_view_if_needed()
    shoot(page, "compare_samples")
