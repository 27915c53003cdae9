"""A custom reward's user code runs outside the app: in the reward helper, with a time limit.

The Train tab's dry run and the check made when the reward is created run in the app process;
a function that never returns (or a file whose top-level code never ends) would have held it,
and a C call that holds the GIL, every request with it (issue 40 item 14). The scene runs in a
subprocess under a deadline (custom_freeze_scene.py), so a regression fails here, not hangs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dragonfarm_core.rewards import RewardErrors, RewardTimeout, checks, reward, score

pytestmark = pytest.mark.slow  # a helper's start, a Python that runs the scene: seconds each
ROOT = Path(__file__).resolve().parents[2]
SCENE = Path(__file__).with_name("custom_freeze_scene.py")
DEADLINE_S = 120  # a hang, not a slow machine: the scene takes a few seconds


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    folder = tmp_path_factory.mktemp("custom")
    try:
        done = subprocess.run([sys.executable, str(SCENE), str(folder)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=DEADLINE_S)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"a custom reward that never returns froze its dry run for {DEADLINE_S} s")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_users_file_is_never_imported_in_the_app_process(scene):
    assert scene["imported_here"] is False and scene["imported_after"] is False


def test_a_function_that_does_not_return_is_refused_naming_the_limit(scene):
    assert scene["message"].startswith("RewardTimeout: Reward 'mine' gave up after 1 s")
    assert "my_reward.py did not return" in scene["message"]
    assert scene["seconds"] < 30
    # The process went on meanwhile: its main thread ticked every 50 ms or so.
    assert scene["ticks"] >= 0.5 * scene["seconds"] / 0.05


def test_a_dry_run_scores_as_the_function_says_and_its_prints_go_nowhere(scene):
    assert scene["fine"] == [4.0]  # len("fine"); the file's prints did not break the answers


def test_a_file_whose_top_level_never_ends_is_refused_at_creation(tmp_path, monkeypatch):
    monkeypatch.setattr(checks, "CUSTOM_TIMEOUT_S", 1.0)
    stuck = tmp_path / "stuck.py"
    stuck.write_text("while True:\n    pass\n\ndef reward(p, c, r, row):\n    return 1\n")
    with pytest.raises(RewardTimeout, match=r"stuck\.py' took longer than 1 s to import"):
        reward("custom", file=str(stuck))


def test_failures_in_the_helper_keep_their_traceback(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("def reward(prompt, completion, reference, row):\n    return 1 / 0\n")
    errors = RewardErrors()
    scores = score([reward("custom", file=str(broken))], ["p", "p"], ["a", "b"], errors=errors,
                   raise_timeouts=True)  # fmt: skip  # as the dry run scores
    assert scores.total == [0.0, 0.0] and errors.counts() == {"custom": (2, 2)}
    tally = errors.tallies["custom"]
    assert tally.first_error == "RewardError: ZeroDivisionError: division by zero"
    assert "return 1 / 0" in tally.first_traceback
