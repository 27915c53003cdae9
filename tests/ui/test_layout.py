"""The app shell: profiles, where runs go, and that the app builds with every tab."""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.auth.profiles import get_profile, runs_dir_for
from ui import layout


def test_build_app_has_one_tab_per_module_and_makes_the_uploads_folder(tmp_path: Path):
    app = layout.build_app(tmp_path / "runs")
    assert isinstance(app, gr.Blocks)
    assert (tmp_path / "runs" / "uploads").is_dir()
    tabs = [block.label for block in app.blocks.values() if isinstance(block, gr.Tab)]
    assert (
        tabs
        == [tab.TITLE for tab in layout.TABS]
        == [
            "Data",
            "Mapping",
            "Model",
            "Train",
            "Monitor",
            "Evaluate",
            "Compare",
            "Pipelines",
            "Chat",
            "Feedback",
            "Export",
            "Runs",
        ]
    )
    public = dragon.app(tmp_path / "other")
    assert isinstance(public, layout.DragonfarmApp) and (tmp_path / "other" / "uploads").is_dir()


def test_the_app_opens_with_the_example_data_loaded(tmp_path: Path):
    app = layout.build_app(tmp_path / "runs")
    on_load = [f for f in app.fns.values() if any(event == "load" for _, event in f.targets)]
    # Each judge choice reads its last measured agreement when the page loads (5 of them:
    # Evaluate, synthesis, pairs, Pipelines, the Train tab's Sweep).
    lines = [f for f in on_load if getattr(f.fn, "__name__", "") == "last_agreement_line"]
    assert len(lines) == 5
    on_load = [f for f in on_load if f not in lines]
    # two listeners: the Data tab's (the example data) and the Export tab's llama.cpp line
    names = [getattr(f.fn, "__name__", "") for f in on_load]
    assert len(on_load) == 2 and names.count("status_text") == 1
    (data_load,) = [f for f, name in zip(on_load, names, strict=True) if name != "status_text"]
    ds, _table, summary, *_ = data_load.fn()
    assert str(ds.source) == str(dragon.example_data()) and "200 rows" in summary


def test_profiles(monkeypatch):
    monkeypatch.delenv("DRAGONFARM_PROFILE", raising=False)
    assert get_profile().name == "local" and get_profile().host == "127.0.0.1"
    monkeypatch.setenv("DRAGONFARM_PROFILE", "spaces")
    assert get_profile().host == "0.0.0.0"
    assert get_profile("local").name == "local"  # the flag wins over the environment
    assert get_profile("lab").login  # the lab profile is there, with login on
    with pytest.raises(ValueError, match="local, lab, spaces"):
        get_profile("cloud")


def test_runs_folder_flag_then_environment_then_default(monkeypatch, tmp_path: Path):
    local = get_profile("local")
    monkeypatch.delenv("DRAGONFARM_RUNS_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert runs_dir_for(None, local) == tmp_path / "dragonfarm_runs"
    monkeypatch.setenv("DRAGONFARM_RUNS_DIR", str(tmp_path / "env"))
    assert runs_dir_for(None, local) == tmp_path / "env"
    assert runs_dir_for(tmp_path / "flag", local) == tmp_path / "flag"


@pytest.mark.slow
def test_app_py_says_where_it_is_and_offers_no_share_link(tmp_path: Path):
    """Gradio's start-up text suggests `share=True`, which this app does not offer."""
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = Path(__file__).resolve().parents[2]
    argv = [sys.executable, "app.py", "--runs-dir", str(tmp_path / "runs"), "--port", str(port)]
    log = tmp_path / "app.log"
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=root, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while "in a browser" not in log.read_text() and proc.poll() is None:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    text = log.read_text()
    assert f"dragonfarm: open http://127.0.0.1:{port}/ in a browser" in text
    assert "share" not in text.lower()
