"""remote_providers(), remote() and python_requirements(): the manual's shapes and behaviour."""

from __future__ import annotations

import webbrowser

import pytest
from results_fakes import bundled_run

import dragonfarm_core as dragon
from dragonfarm_core.rundir import files


@pytest.fixture
def opened(monkeypatch) -> list[str]:
    urls: list[str] = []
    monkeypatch.setattr(webbrowser, "open", lambda url, *a, **k: urls.append(url) or True)
    return urls


def test_the_providers_table():
    table = dragon.remote_providers()
    assert list(table.columns) == ["provider", "name", "cost", "opens"]
    assert list(table["provider"]) == ["colab", "kaggle", "lightning", "runpod"]
    assert table.set_index("provider").loc["runpod", "cost"] == "pay per hour"
    assert all(table["opens"].str.len() > 0)


@pytest.mark.parametrize("provider", ["colab", "kaggle", "lightning", "runpod"])
def test_remote_gives_the_steps_for_each_provider(tmp_path, opened, provider):
    run = bundled_run(tmp_path / "runs")
    info = dragon.remote(run, provider, open=False)
    assert set(info) == {"provider", "url", "bundle", "notebook", "steps"}
    assert info["provider"] == provider and info["url"].startswith("https://")
    assert info["bundle"].endswith(f"dragonfarm-{run.id}.zip")
    assert info["notebook"].endswith(f"dragonfarm-{run.id}.ipynb")
    text = " ".join(info["steps"])
    assert f"dragonfarm-{run.id}.zip" in text and f"dragonfarm-{run.id}.ipynb" in text
    assert "import_results" in info["steps"][-1]
    assert opened == []


def test_remote_opens_the_browser_only_when_asked_or_interactive(tmp_path, opened, monkeypatch):
    run = bundled_run(tmp_path / "runs")
    dragon.remote(run, "kaggle")  # pytest is not an interactive session
    assert opened == []
    dragon.remote(run, "kaggle", open=True)
    assert opened == ["https://www.kaggle.com/code/new"]
    monkeypatch.setattr("sys.ps1", ">>> ", raising=False)
    dragon.remote(run, "colab")
    assert opened[-1] == "https://colab.research.google.com/"


def test_remote_bundles_a_run_that_failed_here_first(runs_root, opened):
    ds = dragon.dataset(dragon.example_data()).map(prompt="{subject}", response="reply")
    run = dragon.train(ds, "dragonfarm/tiny-support", runs_dir=runs_root)
    files.write_status(run.dir, {"state": "failed", "reason": "error", "error": "CUDA OOM"})
    info = dragon.remote(run, "colab", open=False)
    assert run.status()["state"] == "bundled"
    assert (run.dir / "bundle").is_dir() and info["bundle"].startswith(str(run.dir))


def test_an_unknown_provider_is_refused_with_the_choices(tmp_path):
    run = bundled_run(tmp_path / "runs")
    with pytest.raises(ValueError, match="'colab', 'kaggle', 'lightning', 'runpod'"):
        dragon.remote(run, "azure")


def test_python_requirements_lists_pinned_trainer_packages():
    wanted = dragon.python_requirements()
    names = [p.split("==")[0] for p in wanted["packages"]]
    assert {"torch", "transformers", "peft", "trl", "safetensors"} <= set(names)
    assert all("==" in p and "+" not in p for p in wanted["packages"])
    assert "gradio" not in names  # the trainer never needs the app's libraries
