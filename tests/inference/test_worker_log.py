"""The local worker's log in the temp folder: private, and removed when the worker stops, when
the session exits, and (for a session that was killed) when a later worker starts."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from dragonfarm_core.inference import ModelSpec, Sampling, backend_local, local, worker_stop

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SPEC = ModelSpec(base="/models/tiny")


@pytest.fixture(autouse=True)
def fake_worker(monkeypatch, tmp_path):
    monkeypatch.setenv("DRAGONFARM_WORKER_MODULE", "fake_worker")
    monkeypatch.setenv("PYTHONPATH", str(HERE))
    monkeypatch.setenv("FAKE_WORKER_MARKER", str(tmp_path / "marker"))
    worker_stop()
    yield
    worker_stop()


def _chat() -> str:
    return backend_local().chat(SPEC, [{"role": "user", "content": "hi"}], Sampling())


def test_the_log_is_private_and_removed_when_the_worker_stops():
    assert _chat() == "echo: hi"
    log = local.log_path()
    assert "fake worker starting" in log.read_text()
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert worker_stop() is True
    assert not log.exists()


def test_the_log_is_removed_when_the_session_exits(tmp_path):
    code = (
        "from dragonfarm_core.inference import ModelSpec, Sampling, backend_local, local\n"
        "backend_local().chat(ModelSpec(base='/m'), [{'role': 'user', 'content': 'x'}],"
        " Sampling())\n"
        "print(local.log_path())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert not Path(done.stdout.strip().splitlines()[-1]).exists()


def test_a_killed_sessions_log_is_removed_when_a_worker_starts():
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    left = local.log_path(ended.pid)
    left.write_text("--- starting a worker of a session that was killed\n")
    _chat()
    assert not left.exists()
