"""Every test here keeps its runs dir (and so the response cache) in its own tmp folder, and
starts with no Anthropic settings from the environment of whoever runs the tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.llm.llm_fakes import isolated_runs_dir


@pytest.fixture(autouse=True)
def llm_runs_dir(tmp_path, monkeypatch) -> Path:
    return isolated_runs_dir(tmp_path, monkeypatch)
