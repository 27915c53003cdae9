import math
import os
from pathlib import Path

import pytest

from dragonfarm_core.rewards import (
    Reward,
    RewardError,
    RewardErrors,
    assign_names,
    reward,
    score,
    score_one,
)

CUSTOM = '''
def reward(prompt, completion, reference, row):
    """Longer than the reference earns more; unclipped on purpose."""
    return len(completion) / len(reference) + row.get("bonus", 0)


def strict(prompt, completion, reference, row):
    return completion == reference


def raises(prompt, completion, reference, row):
    raise ValueError("cannot score " + completion)


def nan(prompt, completion, reference, row):
    return float("nan")


def text(prompt, completion, reference, row):
    return "high"


def two_args(prompt, completion):
    return 1
'''


@pytest.fixture
def file(tmp_path: Path) -> Path:
    path = tmp_path / "my_reward.py"
    path.write_text(CUSTOM)
    return path


def test_custom_reward_gets_all_four_arguments_and_is_not_clipped(file):
    r = reward("custom", file=str(file))
    assert score_one(r, "p", "abcdef", "abc", {"bonus": 1}) == 3.0
    assert score_one(reward("custom", file=str(file), fn="strict"), "p", "a", "a", {}) == 1.0


@pytest.mark.parametrize(
    "fn, message",
    [
        ("missing", "defines no function 'missing'"),
        ("two_args", "must accept four arguments"),
        ("not a name", "Reward.fn"),
    ],
)
def test_a_bad_function_fails_at_creation(file, fn, message):
    with pytest.raises(RewardError, match=message):
        reward("custom", file=str(file), fn=fn)


def test_a_bad_file_fails_at_creation(tmp_path):
    with pytest.raises(RewardError, match="does not exist"):
        reward("custom", file=str(tmp_path / "nope.py"))
    broken = tmp_path / "broken.py"
    broken.write_text("import not_a_module_anywhere\n")
    with pytest.raises(RewardError, match="failed to import: ModuleNotFoundError"):
        reward("custom", file=str(broken))


@pytest.mark.parametrize("fn", ["raises", "nan", "text"])
def test_raising_nan_or_text_scores_zero_and_is_counted(file, fn):
    errors = RewardErrors()
    r = reward("custom", file=str(file), fn=fn, name="mine")
    scores = score([r, reward("exact")], ["p", "p"], ["a", "b"], ["a", "a"], [{}, {}], errors)
    assert scores.per_reward == {"mine": [0.0, 0.0], "exact": [1.0, 0.0]}
    assert errors.counts() == {"mine": (2, 2), "exact": (2, 0)}


def test_the_run_fails_past_the_error_rate_with_the_first_traceback(file):
    errors = RewardErrors()
    r = reward("custom", file=str(file), fn="raises")
    for i in range(19):
        score([r], ["p"], [f"c{i}"], ["r"], [{}], errors)
    errors.check()  # too few calls to judge yet
    score([r], ["p"], ["c19"], ["r"], [{}], errors)
    with pytest.raises(RewardError, match="'custom' failed on 20 of 20") as info:
        errors.check()
    assert "ValueError: cannot score c0" in info.value.traceback
    assert "cannot score c0" in str(info.value) and "c19" not in info.value.traceback


def test_copy_into_keeps_the_run_self_contained(file, tmp_path):
    run_dir = tmp_path / "run"
    r = reward("custom", file=str(file), name="length_bonus").copy_into(run_dir)
    copy = run_dir / "rewards" / "length_bonus.py"
    assert Path(r.file) == copy.resolve() and copy.read_text() == CUSTOM
    stored = r.to_dict(run_dir)
    assert stored["file"] == "rewards/length_bonus.py"
    file.unlink()  # the original may go away; the run still works, even moved elsewhere
    moved = tmp_path / "moved"
    run_dir.rename(moved)
    again = Reward.from_dict(stored, run_dir=moved)
    assert again.file == str((moved / "rewards" / "length_bonus.py").resolve())
    assert score_one(again, "p", "abcd", "ab", {}) == 2.0
    assert reward("exact").copy_into(run_dir) == reward("exact")


def test_an_edited_file_is_imported_again(file):
    r = reward("custom", file=str(file))
    assert score_one(r, "p", "ab", "ab", {}) == 1.0
    file.write_text("def reward(prompt, completion, reference, row):\n    return -2.5\n")

    stat = file.stat()
    os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert score_one(r, "p", "ab", "ab", {}) == -2.5
    assert math.isfinite(score_one(r, "p", "", "x", {}))


def test_two_custom_rewards_get_their_own_copies(file, tmp_path):
    other = tmp_path / "other.py"
    other.write_text("def reward(prompt, completion, reference, row):\n    return 0.5\n")
    first, second = reward("custom", file=str(file)), reward("custom", file=str(other))
    named = [r.copy_into(tmp_path / "run") for r in assign_names([first, second])]
    assert [Path(r.file).name for r in named] == ["custom.py", "custom_2.py"]
    first.copy_into(tmp_path / "run2")
    with pytest.raises(RewardError, match="give each custom reward its own name"):
        second.copy_into(tmp_path / "run2")
