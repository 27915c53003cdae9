"""The lineage tests' loop (tests/lineage/loop.py) in tests/conftest.py's `runs_root`, where
launching is stubbed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lineage.loop import Chain, build_chain


@pytest.fixture
def chain(runs_root: Path, model_dir: Path, tmp_path: Path) -> Chain:
    return build_chain(runs_root, model_dir, tmp_path)
