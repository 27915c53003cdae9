"""The Runs tab draws a run's lineage and opens a parent from it: the loop data -> SFT run ->
feedback -> pairs -> DPO run -> merged folder, written into the app's runs folder by the test
(launching stubbed in this process, each run left as a trainer leaves it)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from dragonfarm_core.rundir import launch
from tests.lineage.loop import Chain, build_chain

WAIT_MS = 30_000


@pytest.fixture(scope="module")
def loop(app_server, tmp_path_factory: pytest.TempPathFactory) -> Chain:
    base = tmp_path_factory.mktemp("lineage")
    model = base / "Tiny-Model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(launch, "start_run", lambda run_dir, **fields: 0)
        return build_chain(app_server[1], model, base)


def shoot(page: Page, name: str) -> None:
    if folder := os.environ.get("DRAGONFARM_SHOTS"):
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


@pytest.mark.browser
def test_the_runs_tab_draws_a_lineage_and_opens_a_parent(loop: Chain, page: Page):
    page.get_by_role("tab", name="Runs", exact=True).click()
    page.locator("#runs-chosen input").click()
    page.get_by_role("option", name=loop.dpo.id, exact=True).click()
    page.locator("#runs-lineage").click()

    nodes = page.locator("#lineage-nodes")
    for text in ("tickets.csv", loop.sft.id, "pairs-round1.jsonl", "merged model", "(this one)"):
        expect(nodes).to_contain_text(text, timeout=WAIT_MS)
    expect(page.locator("#lineage-plot .js-plotly-plot")).to_be_visible()
    expect(page.locator("#lineage-plot")).to_contain_text("continued from")
    expect(page.locator("#runs-code")).to_contain_text(f'dragon.lineage("{loop.dpo.id}"')
    shoot(page, "runs_lineage")

    # Open the parent run from the lineage: it is picked in the Runs tab and drawn in turn.
    page.locator("#lineage-open input").click()
    page.get_by_role("option", name=f"run: {loop.sft.id}", exact=True).click()
    expect(page.locator("#runs-chosen input")).to_have_value(loop.sft.id, timeout=WAIT_MS)
    expect(page.locator("#runs-message")).to_contain_text(f"Lineage of {loop.sft.id}")
    expect(page.locator("#runs-code")).to_contain_text(f'dragon.lineage("{loop.sft.id}"')
    expect(nodes).to_contain_text("sft-round1.jsonl")  # its own children now
    expect(page.locator("#lineage-open input")).to_have_value(f"run: {loop.sft.id} (this one)")
    expect(page.locator(".toast-body")).to_have_count(0)  # no error shown along the way
    # The Monitor follows the run picked.
    page.get_by_role("tab", name="Monitor", exact=True).click()
    expect(page.locator("#monitor-header")).to_contain_text(loop.sft.id, timeout=WAIT_MS)
    shoot(page, "runs_lineage_parent")
