"""A run folder made before the package was reorganised into capability folders still opens,
resumes, compares and exports.

fixtures/run_before_layout/ was written by the code of c593cb6 (the last commit before the
layout change): an SFT run of the bundled model (LoRA r=2, 16 steps) cancelled after step 5,
with the checkpoints at steps 4 and 5 and the adapter its cancel saved. The paths it held are
@ROOT@ (the repository) and @HERE@ (the fixture's folder), filled in for this checkout."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.export.merge import merge_check

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "run_before_layout"
RUN_ID = "20261207-081230-made-before-the-layout"
TEXT = {".json", ".jsonl", ".log", ".md"}


@pytest.fixture
def old_run(tmp_path) -> Path:
    here = tmp_path / "before"
    shutil.copytree(FIXTURE, here)
    for path in here.rglob("*"):
        if path.suffix in TEXT:
            text = path.read_text().replace("@ROOT@", str(ROOT)).replace("@HERE@", str(here))
            path.write_text(text)
    return here / "runs" / RUN_ID


def test_the_old_run_opens_with_its_progress_and_settings(old_run):
    run = dragon.open_run(old_run)
    assert run.status()["state"] == "cancelled" and run.status()["step"] == 5
    assert list(run.progress()["step"])[-1] == 5
    spec = dragon.RunSpec.from_dict(run.config, run_dir=run.dir)
    assert spec.method == "sft" and spec.lora.r == 2 and spec.args.save_steps == 4
    row = dragon.compare(run).iloc[0]
    assert row["id"] == RUN_ID and row["method"] == "sft"


@pytest.mark.slow
def test_the_old_run_resumes_to_the_end_then_compares_and_merges(old_run):
    run = dragon.resume(old_run, wait=True)
    status = run.status()
    assert status["state"] == "succeeded", status
    assert status["step"] == status["total_steps"] == 16
    assert any("resum" in line.lower() and "5" in line for line in run.logs(200)), run.logs(200)
    row = dragon.compare(run).iloc[0]
    assert row["state"] == "succeeded"
    merged = dragon.merge(run)
    assert (merged / "config.json").is_file()
    assert merge_check(merged)["identical"] is True  # the merged model answers as base + adapter
