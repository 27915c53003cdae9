"""Where runs live: argument, then set_runs_dir()/DRAGONFARM_RUNS_DIR, then a session temp dir
that is removed at exit unless a run in it is still active, and announced once."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import psutil
import pytest

from dragonfarm_core.rundir import location
from dragonfarm_core.rundir.create import create_run

ROOT = Path(__file__).resolve().parents[2]


def test_argument_then_setting_then_env(tmp_path, fake_env, monkeypatch):
    monkeypatch.setenv(location.ENV_VAR, str(tmp_path / "from-env"))
    assert location.runs_dir(tmp_path / "arg") == (tmp_path / "arg").resolve()
    assert location.runs_dir() == (tmp_path / "from-env").resolve()
    previous = location.set_runs_dir(tmp_path / "set")
    assert location.runs_dir() == (tmp_path / "set").resolve()
    assert location.runs_dir(tmp_path / "arg") == (tmp_path / "arg").resolve()
    location.set_runs_dir(previous)
    assert location.runs_dir() == (tmp_path / "from-env").resolve()


SESSION_SCRIPT = """
import sys
from dragonfarm_core.rundir import files, location
root = location.runs_dir()
assert location.is_session_dir(root) and root.name == "dragonfarm_runs", root
run = root / "20260101-000000-demo"
run.mkdir()
files.write_config(run, {"schema": 1, "id": run.name, "method": "sft"})
files.write_status(run, {"state": sys.argv[1], "pid": int(sys.argv[2]),
                         "pid_create_time": float(sys.argv[3])})
print(root)
"""


def _session(state: str, pid: int, created: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != location.ENV_VAR}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-c", SESSION_SCRIPT, state, str(pid), str(created)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )


def test_session_dir_removed_at_exit_when_no_run_is_active():
    done = _session("succeeded", 0, 0.0)
    root = Path(done.stdout.strip())
    assert root.name == "dragonfarm_runs"
    assert not root.exists() and not root.parent.exists()


def test_session_dir_kept_at_exit_while_a_run_is_running():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    root = None
    try:
        created = psutil.Process(sleeper.pid).create_time()
        done = _session("running", sleeper.pid, created)
        root = Path(done.stdout.strip())
        assert root.is_dir(), "the folder of a running run must survive the session"
        assert "still queued or running" in done.stderr
    finally:
        sleeper.kill()
        sleeper.wait()
        if root is not None:
            shutil.rmtree(root.parent, ignore_errors=True)


def test_first_run_in_the_session_dir_warns_once(
    tmp_path, fake_env, monkeypatch, sft_data, model_dir
):
    session = tmp_path / "dragonfarm-session-x" / "dragonfarm_runs"
    session.mkdir(parents=True)
    monkeypatch.setattr(location, "_session_dir", session.resolve())
    monkeypatch.setattr(location, "_announced", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = create_run("sft", sft_data, str(model_dir))
        second = create_run("sft", sft_data, str(model_dir))
    said = [w for w in caught if "removed when this Python session ends" in str(w.message)]
    assert len(said) == 1
    assert first.parent == second.parent == session.resolve()


def test_explicit_runs_dir_never_warns(runs_root, sft_data, model_dir, monkeypatch):
    monkeypatch.setattr(location, "_announced", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        create_run("sft", sft_data, str(model_dir), runs_dir=runs_root)


@pytest.mark.parametrize("value", ["", "   "])
def test_blank_argument_means_default(value, tmp_path, fake_env, monkeypatch):
    monkeypatch.setenv(location.ENV_VAR, str(tmp_path))
    assert location.runs_dir(value) == tmp_path.resolve()
