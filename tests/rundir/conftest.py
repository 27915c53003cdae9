"""Fixtures for the run-lifecycle tests: a runs directory, the fake trainer, a small mapped
dataset, a stand-in model folder, and teardown that kills every trainer process a test started.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest

from dragonfarm_core.data.dataset import Dataset, dataset
from dragonfarm_core.rundir import files, jobs, launch, location

TESTS_DIR = Path(__file__).resolve().parents[1]
KNOBS = ("STEPS", "STEP_S", "SAVE_EVERY", "FAIL_AT", "DISK_FULL_AT", "IGNORE_CANCEL", "IGNORE_TERM",
         "NO_FINAL", "EVAL")  # fmt: skip


def _kill(status: dict) -> None:
    if status.get("pid") == os.getpid():  # a test that pretended this process is a trainer
        return
    if launch.process_alive(status):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(status["pid"], signal.SIGKILL)
        end = time.monotonic() + 5
        while launch.process_alive(status) and time.monotonic() < end:
            time.sleep(0.02)


def kill_runs_under(root: Path) -> None:
    """SIGKILL the process group of every live run below `root` (archived ones too)."""
    for config in root.rglob(files.CONFIG):
        _kill(files.read_status(config.parent))


@pytest.fixture(autouse=True)
def _kill_children() -> Iterator[None]:
    """Whatever happens in a test, no trainer or job process it started outlives it."""
    before = set(jobs._children)
    yield
    for pid in set(jobs._children) - before:
        child = jobs._children.pop(pid)
        if child.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            child.wait(timeout=5)


@pytest.fixture
def fake_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trainer processes run tests/fake_trainer.py; no knob or runs-dir setting leaks in."""
    monkeypatch.setenv("DRAGONFARM_TRAINER_MODULE", "fake_trainer")
    monkeypatch.setenv(
        "PYTHONPATH",
        os.pathsep.join(p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH")) if p),
    )
    for knob in KNOBS:
        monkeypatch.delenv(f"FAKE_TRAINER_{knob}", raising=False)
    monkeypatch.delenv("DRAGONFARM_MAX_CONCURRENT", raising=False)
    monkeypatch.delenv(location.ENV_VAR, raising=False)
    monkeypatch.setattr(location, "_configured", None)


@pytest.fixture
def runs_root(tmp_path: Path, fake_env: None) -> Iterator[Path]:
    root = tmp_path / "runs"
    root.mkdir()
    yield root
    kill_runs_under(root)


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A folder that resolve_model accepts as a local model (the fake trainer never loads it)."""
    path = tmp_path / "models" / "Tiny-Model"
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return path


@pytest.fixture
def tickets_csv(tmp_path: Path) -> Path:
    rows = [
        {"question": f"My device {i} keeps rebooting", "answer": f"Reset it ({i})."}
        for i in range(24)
    ]
    path = tmp_path / "tickets.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


@pytest.fixture
def sft_data(tickets_csv: Path) -> Dataset:
    return dataset(tickets_csv).map(prompt="question", response="answer")


def _wait_for(predicate: Callable[[], bool], timeout: float = 20, what: str = "it") -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def wait_for() -> Callable[..., None]:
    """wait_for(predicate, timeout=20, what=...): poll until true, else fail the test."""
    return _wait_for
