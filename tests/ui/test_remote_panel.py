"""Run elsewhere (Train tab) and Import (Runs and Monitor tabs), called as the pages call them.

Run elsewhere bundles the Train tab's widgets with the bundled model (nothing trains); Import
takes a results zip made by tests/results_fakes.py, and a hostile one is refused on the page.
"""

from __future__ import annotations

import functools
from pathlib import Path

import gradio as gr
import pytest
from results_fakes import bundled_run, good_results, write_zip

import dragonfarm_core as dragon
from dragonfarm_core.method_args import DpoArgs, ReinforceArgs
from dragonfarm_core.models import ResolvedModel
from ui import remote_panel
from ui.settings_form import settings_fields
from ui.tabs import train


@functools.cache
def _defaults() -> dict:
    with gr.Blocks():
        groups = {cls.__name__: settings_fields(cls) for cls in (*train.SETTINGS, ReinforceArgs)}
        groups["DpoArgs"] = settings_fields(DpoArgs, only=train.DPO_OWN)
    return {group: {name: w.value for name, w in ws.items()} for group, ws in groups.items()}


def _inputs(mapped, method: str = "sft") -> dict:
    """Start's input values by name: mapped, model, method, parent, name, beta, rewards,
    settings."""
    model = ResolvedModel.bundled()
    return {"mapped": mapped, "model": model, "method": method, "parent": "",
            "name": "remote-try", "beta": 0.1, "rewards": [], "settings": _defaults()}  # fmt: skip


def _tickets() -> dragon.Dataset:
    return dragon.dataset(dragon.example_data()).map(prompt="{subject}", response="reply")


def test_run_elsewhere_bundles_and_shows_steps_downloads_and_code(tmp_path):
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    run_dir, steps, files, code, error = remote_panel.run_elsewhere(
        train.checked_spec, "kaggle", **_inputs(_tickets()), runs_dir=runs_dir
    )
    assert error == ""
    run = dragon.open_run(run_dir)
    assert run.status()["state"] == "bundled" and run.name == "remote-try"
    assert "https://www.kaggle.com/code/new" in steps and "Import notebook" in steps
    shown = [Path(p) for p in files["value"]]
    assert [p.name for p in shown] == [f"dragonfarm-{run.id}.zip", f"dragonfarm-{run.id}.ipynb"]
    assert all(not p.is_relative_to(runs_dir) for p in shown)  # the runs folder is never served
    assert "dragon.bundle(" in code and 'method="sft"' in code
    assert 'dragon.remote(run, "kaggle")' in code and "hardware=" not in code


@pytest.mark.slow
def test_the_code_panel_bundles_the_same_run(tmp_path):
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    run_dir, *_, code, _ = remote_panel.run_elsewhere(
        train.checked_spec, "colab", **_inputs(_tickets()), runs_dir=runs_dir
    )
    namespace: dict = {}
    exec(code, namespace)  # noqa: S102 - the panel's own script, run as a person would
    again = namespace["run"]
    assert again.dir != Path(run_dir) and again.status()["state"] == "bundled"
    strip = {"id", "created_at"}
    assert {k: v for k, v in again.config.items() if k not in strip} == {
        k: v for k, v in dragon.open_run(run_dir).config.items() if k not in strip}  # fmt: skip


def test_run_elsewhere_without_data_says_what_to_do(tmp_path):
    *_, error = remote_panel.run_elsewhere(
        train.checked_spec, "colab", **_inputs(None), runs_dir=tmp_path
    )
    assert "No mapped dataset yet" in error


def test_import_takes_a_results_zip_and_shows_the_call(tmp_path):
    runs_dir = tmp_path / "runs"
    run = bundled_run(runs_dir)
    results = write_zip(tmp_path / f"dragonfarm-results-{run.id}.zip", good_results(run))
    message, code, cleared = remote_panel.import_results(run.id, str(results), runs_dir=runs_dir)
    assert "Imported the results" in message and "succeeded" in message
    assert f'dragon.import_results(run, "dragonfarm-results-{run.id}.zip")' in code
    assert cleared is None and run.status()["state"] == "succeeded"


def test_import_shows_the_refusal_of_a_hostile_zip(tmp_path):
    runs_dir = tmp_path / "runs"
    run = bundled_run(runs_dir)
    hostile = write_zip(tmp_path / "r.zip", good_results(run) | {"../evil.py": b"x"})
    with pytest.warns(UserWarning):  # gr.Warning outside a request warns
        message, *_ = remote_panel.import_results(run.id, str(hostile), runs_dir=runs_dir)
    assert "Import refused" in message and "&#x27;..&#x27; part" in message
    assert run.status()["state"] == "bundled"


def test_import_refuses_a_run_outside_the_runs_dir(tmp_path):
    run = bundled_run(tmp_path / "elsewhere")
    (tmp_path / "runs").mkdir()
    results = write_zip(tmp_path / "r.zip", good_results(run))
    with pytest.warns(UserWarning):
        message, *_ = remote_panel.import_results(
            str(run.dir), str(results), runs_dir=tmp_path / "runs"
        )
    assert "Import refused" in message and run.status()["state"] == "bundled"
