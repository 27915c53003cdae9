import pytest

from dragonfarm_core.rewards import RewardError, RewardErrors, reward, score


def test_weighted_total_and_named_columns():
    rewards = [
        reward("numeric"),
        reward("length", max_chars=10, weight=0.5),
        reward("regex", pattern="^It"),
        reward("regex", pattern=r"\d$", weight=-1),
    ]
    s = score(rewards, ["q1", "q2"], ["It is 4", "it is about 5 or 6"], ["4", "5"], [{}, {}])
    assert list(s.per_reward) == ["numeric", "length", "regex", "regex_2"]
    assert s.per_reward["numeric"] == [1.0, 0.0] and s.per_reward["regex_2"] == [1.0, 1.0]
    assert s.per_reward["length"] == pytest.approx([1.0, 0.2])
    assert s.total == pytest.approx([1.5, 0.1])


def test_a_missing_reference_is_a_counted_error():
    errors = RewardErrors()
    s = score([reward("exact")], ["q"], ["x"], [None], [{}], errors)
    assert s.total == [0.0] and errors.counts() == {"exact": (1, 1)}
    assert "map a reference column" in errors.tallies["exact"].first_traceback


def test_error_rate_limit_is_per_reward_and_needs_enough_calls():
    errors = RewardErrors(max_rate=0.2, min_calls=20)
    for i in range(20):
        errors.record("ok")
        errors.record("flaky", RuntimeError(f"failure {i}") if i < 4 else None)
    errors.check()  # 4 of 20 is exactly 20%: allowed
    errors.record("flaky", RuntimeError("one more"))
    with pytest.raises(RewardError, match="'flaky' failed on 5 of 21") as info:
        errors.check()
    assert "RuntimeError: failure 0" in info.value.traceback


def test_lengths_must_match():
    with pytest.raises(ValueError, match="1 prompts for 2 completions"):
        score([reward("json")], ["p"], ["{}", "[]"])


def test_messages_as_completions():
    s = score(
        [reward("json")],
        [[{"role": "user", "content": "q"}]],
        [[{"role": "assistant", "content": '{"a": 1}'}]],
    )
    assert s.total == [1.0]
