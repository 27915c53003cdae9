"""Fixtures for the API tests at the top of tests/ (subfolders have their own conftest.py)."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from dragonfarm_core.rundir import launch, location

# This test session gets its own machine-wide training queue (rundir/queue.py), so its trainers
# never wait for, or hold up, real trainings or another session's. Child processes receive an
# allow-listed environment (launch.child_env): the stand-in trainer's and worker's knobs are
# added to the list.
os.environ["DRAGONFARM_QUEUE_DIR"] = tempfile.mkdtemp(prefix="dragonfarm-test-queue-")
atexit.register(shutil.rmtree, os.environ["DRAGONFARM_QUEUE_DIR"], True)
os.environ["DRAGONFARM_PASS_ENV"] = "FAKE_TRAINER_*,FAKE_WORKER_*"
# Workers do not compile their one-row step (seconds of a core each load, in a background
# thread): tests/inference/test_worker_step.py and test_worker_dtype.py turn it on where they
# test it.
os.environ["DRAGONFARM_COMPILE_DECODE"] = "0"


@pytest.fixture
def runs_root(tmp_path, monkeypatch) -> Path:
    """Runs go to tmp and launching is stubbed: for tests about what a run directory holds."""
    monkeypatch.delenv(location.ENV_VAR, raising=False)
    monkeypatch.setattr(location, "_configured", None)
    monkeypatch.setattr(launch, "start_run", lambda run_dir, **fields: 0)
    root = tmp_path / "runs"
    root.mkdir()
    return root


@pytest.fixture
def model_dir(tmp_path) -> Path:
    """A local model folder as far as validation goes (nothing loads it)."""
    path = tmp_path / "Tiny-Model"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return path


@pytest.fixture(scope="session")
def bundled_gguf(tmp_path_factory) -> Path:
    """The bundled model as an f16 GGUF (llama.cpp's converter), beside a copy of its folder
    (`gguf.with_name("tiny-support")`); made once a session for the tests that serve it
    (markers gguf, slow). A test that changes it works on a copy."""
    import dragonfarm_core as dragon
    from dragonfarm_core.llamacpp import location as llama_cpp
    from dragonfarm_core.llamacpp.location import LlamaCppMissing
    from dragonfarm_core.models import bundled_model_path

    try:
        llama_cpp.find_llama_cpp().binary(llama_cpp.SERVER)
    except LlamaCppMissing as e:
        pytest.fail(f"These tests need llama.cpp: {e}")
    folder = tmp_path_factory.mktemp("bundled-gguf") / "tiny-support"
    shutil.copytree(bundled_model_path(), folder)
    return dragon.export_gguf(folder, quant="f16")
