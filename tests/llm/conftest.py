"""Every test here keeps its runs dir (and so the response cache) in its own tmp folder, and
starts with no Anthropic settings from the environment of whoever runs the tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from dragonfarm_core.rundir import location


@pytest.fixture(autouse=True)
def llm_runs_dir(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "runs"
    root.mkdir()
    monkeypatch.setattr(location, "_configured", None)
    monkeypatch.setenv(location.ENV_VAR, str(root))
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return root
