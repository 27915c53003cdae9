"""No secret for a reward command: not from the app, not from the trainer, not from any process
it can walk up to or read; and nothing a command starts outlives it.

The hostile command is proc_snoop.py: it reads /proc/<pid>/environ of each of its ancestors up
to pid 1 and of every other process it can, looking for canary values that the calling process
was started with (its real initial environment, as /proc shows it, not just os.environ).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import psutil
import pytest

from dragonfarm_core.data.dataset import dataset
from dragonfarm_core.rewards.command import run_command
from dragonfarm_core.rundir import files, launch
from dragonfarm_core.rundir.create import create_run
from dragonfarm_core.rundir.run import Run, RunFailedError

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TESTS = HERE.parent
SNOOP = HERE / "proc_snoop.py"
# Names a careless scrub by name fragments lets through, next to the obvious ones.
SECRET_NAMES = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "DATABASE_URI",
    "MY_SERVICE_PAT",
    "AWS_SECRET_ACCESS_KEY",
    "OPENAI_API_KEY",
    "DRAGONFARM_BACKEND_API_KEY",
)


@pytest.fixture
def canaries() -> dict[str, str]:
    """One unique fake secret per name: found anywhere, it leaked from this test."""
    return {name: f"canary-{uuid.uuid4().hex}" for name in SECRET_NAMES}


@pytest.fixture
def snoop_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A created (not started) run whose trainer will be snoop_trainer; killed at teardown."""
    monkeypatch.setenv("DRAGONFARM_TRAINER_MODULE", "snoop_trainer")
    paths = [str(HERE), str(TESTS), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    monkeypatch.delenv("DRAGONFARM_MAX_CONCURRENT", raising=False)
    model = tmp_path / "models" / "Tiny-Model"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    csv = tmp_path / "rows.csv"
    pd.DataFrame({"q": [f"question {i}" for i in range(8)], "a": ["answer"] * 8}).to_csv(csv)
    ds = dataset(csv).map(prompt="q", response="a")
    run_dir = Path(create_run("sft", ds, str(model), runs_dir=tmp_path / "runs"))
    yield run_dir
    status = files.read_status(run_dir)
    if launch.process_alive(status):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(status["pid"], signal.SIGKILL)
        end = time.monotonic() + 5
        while launch.process_alive(status) and time.monotonic() < end:
            time.sleep(0.02)


# The app: started with the canaries in its environment, it scores one completion with a
# command reward that runs proc_snoop.py (through score(), or through test_rewards() with a
# backend that answers from a script). "reaper" makes the app a child subreaper first, as the
# app is when it runs as PID 1 in a container: orphans, the reward helper too, land on it.
APP = r"""
import ctypes, json, os, sys
from dragonfarm_core.rewards import RewardErrors, reward, score
how, snoop, report, *needles = sys.argv[1:]
if how == "reaper":  # prctl(PR_SET_CHILD_SUBREAPER, 1)
    assert ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) == 0
r = reward("command", command=[sys.executable, snoop, report, *needles], timeout=60)
if how == "test_rewards":
    import dragonfarm_core as dragon

    class Scripted:
        name, model = "scripted", "scripted-model"

        def generate(self, model, conversations, sampling):
            return ["a completion"] * len(conversations)

    table = dragon.test_rewards(r, None, ["a prompt"], n=1, backend=Scripted())
    total = list(table["total"])
else:
    errors = RewardErrors()
    total = score([r], ["p"], ["c"], errors=errors).total
    assert errors.counts() == {"command": (1, 0)}, errors.tallies
with open("/proc/self/environ", "rb") as f:
    shown = f.read()
import time
import psutil
from dragonfarm_core.rewards import runner
runner.close_all()  # the helpers exit; one that landed on this process must not stay a zombie
deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    helpers = [c.pid for c in psutil.Process().children()]
    if not helpers:
        break
    time.sleep(0.05)
print(json.dumps({"pid": os.getpid(), "total": total, "values": [os.environ[k] for k in
      ("HF_TOKEN", "DATABASE_URI")], "shown": [n for n in needles if n.encode() in shown],
      "children_left": helpers}))
"""


def _app(how: str, canaries: dict[str, str], report: Path) -> dict:
    env = {**os.environ, **canaries}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-c", APP, how, str(SNOOP), str(report), *canaries.values()],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("how", ["score", "test_rewards", "reaper"])
@pytest.mark.slow
def test_a_command_reward_finds_no_secret_in_any_process_it_can_read(tmp_path, canaries, how):
    report = tmp_path / "snoop.json"
    app = _app(how, canaries, report)
    assert app["total"] == [1.0]  # the command ran, and exited 0
    seen = json.loads(report.read_text())
    assert seen["hits"] == [] and seen["own_env_hits"] == []
    assert seen["readable"] > 1  # it could read other processes' environments: a real check
    if how == "reaper":
        # The helper landed on the app, so the app was an ancestor the command read...
        assert app["pid"] in seen["ancestors"] and app["pid"] not in seen["unreadable_ancestors"]
        # ...and what /proc shows of the app's environment no longer holds the secrets,
        # while the app itself still has them.
        assert app["shown"] == []
        assert app["values"] == [canaries["HF_TOKEN"], canaries["DATABASE_URI"]]
    else:
        assert app["pid"] not in seen["ancestors"]  # the helper is not the app's descendant
    # Let go, the helpers ended, and one that had landed on the app was reaped by it.
    assert app["children_left"] == []


def test_hiding_the_environment_keeps_every_value_for_the_process_and_its_children(canaries):
    code = (
        "import json, os, subprocess\n"
        "from dragonfarm_core.rundir import launch\n"
        "done = launch.hide_environ()\n"
        "shown = open('/proc/self/environ', 'rb').read().decode()\n"
        "child = subprocess.run(['sh', '-c', 'echo $HF_TOKEN'], capture_output=True, text=True)\n"
        "print(json.dumps([done, shown, os.environ['MY_SERVICE_PAT'], child.stdout.strip()]))\n"
    )
    env = {**os.environ, **canaries, "PYTHONPATH": str(ROOT), "LC_ALL": "C.UTF-8"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    done, shown, value, child = json.loads(out.stdout)
    assert done is True
    assert not any(c in shown for c in canaries.values())
    assert "PATH=" in shown and "LC_ALL=C.UTF-8" in shown  # what children get stays visible
    assert value == canaries["MY_SERVICE_PAT"] and child == canaries["HF_TOKEN"]


@pytest.mark.slow
def test_rewards_inside_the_trainer_find_no_secret(snoop_run, canaries, monkeypatch):
    for name, value in canaries.items():
        monkeypatch.setenv(name, value)  # the app's environment when it launches the run
    (snoop_run / "snoop.json").write_text(
        json.dumps({"snoop": str(SNOOP), "needles": list(canaries.values())})
    )
    launch.start_run(snoop_run)
    try:
        Run(snoop_run).wait(poll=0.05, timeout=120)
    except RunFailedError:
        raise AssertionError("\n".join(Run(snoop_run).logs(40))) from None
    trainer = files.read_json(snoop_run / "trainer-report.json")
    assert trainer["reward"] == [1.0] and trainer["reward_errors"] == {"command": [1, 0]}
    assert trainer["environ_hits"] == [] and trainer["proc_environ_hits"] == []
    assert not set(canaries) & set(trainer["environ_names"])
    seen = files.read_json(snoop_run / "snoop-report.json")
    assert seen["hits"] == [] and seen["own_env_hits"] == []
    assert trainer["pid"] not in seen["ancestors"]


# Leaves two sleepers behind and records their pids: a daemon (double-forked and in a session
# of its own, so an orphan outside the command's group at once) and a child in a session of its
# own (outside the group; an orphan once the command ends).
ESCAPE = r"""
import os, subprocess, sys
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    pid = os.fork()
    if pid == 0:
        os.execvp("sleep", ["sleep", "300"])
    os.write(w, str(pid).encode())
    os._exit(0)
os.close(w)
daemon = int(os.read(r, 64))
alone = subprocess.Popen(["sleep", "301"], start_new_session=True)
open(sys.argv[1], "w").write(f"{daemon} {alone.pid}")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a child subreaper is Linux's")
@pytest.mark.parametrize("ends", ["exits", "times out"])
@pytest.mark.slow
def test_what_a_command_double_forks_or_setsids_is_gone_when_the_reward_returns(tmp_path, ends):
    pids_file = tmp_path / "pids"
    code = ESCAPE + ("import time; time.sleep(120)\n" if ends == "times out" else "")
    result = run_command([sys.executable, "-c", code, str(pids_file)], "", timeout=3)
    assert result.timed_out is (ends == "times out")
    pids = [int(p) for p in pids_file.read_text().split()]
    assert len(pids) == 2
    left = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            left.append((pid, psutil.Process(pid).status()))  # even a zombie is left over
    assert left == [], "killed and reaped before the reward returned"


@pytest.mark.slow
def test_a_helper_ends_when_its_caller_ends(tmp_path):
    code = (
        "import json, sys\n"
        "from dragonfarm_core.rewards import runner\n"
        "runner.run([sys.executable, '-c', 'pass'], '', 'stdin', 10)\n"
        "print(json.dumps([h.pid for h in runner._idle]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    (pid,) = json.loads(done.stdout)
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not psutil.pid_exists(pid)
