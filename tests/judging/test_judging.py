"""Scoring and pairwise verdicts (dragonfarm_core.judging.judges): plain callables and the official
clients against the local fake servers."""

from __future__ import annotations

import json
import re

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.judging.judges import (
    Score,
    as_judge,
    compare_replies,
    describe_judge,
    score_replies,
)
from dragonfarm_core.judging.questions import REASK
from dragonfarm_core.llm import Reply
from tests.llm.llm_fakes import FakeAnthropic, FakeOpenAI


def scorer(value=7, rationale="fine"):
    """A judge function answering every prompt with the same score."""
    calls: list[list[str]] = []

    def judge(prompts):
        calls.append(list(prompts))
        return [json.dumps({"score": value, "rationale": rationale}) for _ in prompts]

    judge.calls = calls  # type: ignore[attr-defined]
    return judge


def first_position(prompts):
    """A judge that always picks whatever is shown first."""
    return [{"winner": "A", "rationale": "first"} for _ in prompts]


def reply_of(question: str, label: str) -> str:
    return re.search(rf"\[{label}\]\n(.*?)\n", question, re.S).group(1)


def prefers(word: str):
    """A consistent judge: picks the reply containing `word` wherever it is shown."""

    def judge(prompts):
        return [
            {"winner": "A" if word in reply_of(p, "Reply A") else "B", "rationale": "r"}
            for p in prompts
        ]

    return judge


# -- scoring -------------------------------------------------------------------------------------


def test_scores_from_a_plain_callable_with_reference_and_rubric():
    judge = scorer(8, "clear")
    scores = score_replies(
        judge, ["q1", "q2"], ["a1", "a2"], rubric="Be kind.", references=["ref1", None]
    )
    assert scores == [Score(8.0, "clear", None), Score(8.0, "clear", None)]
    first, second = judge.calls[0]
    assert "Be kind." in first and "q1" in first and "a1" in first and "ref1" in first
    assert "Reference answer" not in second


def test_refusal_empty_and_error_replies_are_never_sent_to_the_judge():
    judge = scorer(9)
    replies = [Reply(text="no", refusal=True), "  ", Reply(error="boom"), Reply(text="fine")]
    scores = score_replies(judge, ["a", "b", "c", "d"], replies)
    assert [s.failure for s in scores] == ["refusal", "empty", "error: boom", None]
    assert [s.score for s in scores] == [None, None, None, 9.0]
    assert len(judge.calls) == 1 and len(judge.calls[0]) == 1


def test_unparsable_answer_is_asked_again_once_then_counted_never_guessed():
    asked: list[str] = []

    def judge(prompts):
        asked.extend(prompts)
        out = []
        for p in prompts:
            if "q-good" in p:
                out.append('{"score": 6, "rationale": "ok"}')
            elif "q-fixed" in p and p.endswith(REASK):
                out.append('{"score": 4, "rationale": "second try"}')
            else:
                out.append("I'd give it a 7/10.")  # a number is there: it must not be taken
        return out

    scores = score_replies(judge, ["q-good", "q-fixed", "q-bad"], ["x", "y", "z"])
    assert scores[0] == Score(6.0, "ok", None)
    assert scores[1] == Score(4.0, "second try", None)
    assert scores[2].score is None and scores[2].failure == "unparsed"
    assert len(asked) == 5  # three, then the two unusable ones again, once


@pytest.mark.parametrize(
    "answer", ['{"score": 11}', '{"score": "7"}', '{"score": true}', '["7"]', '{"rating": 7}']
)
def test_json_without_a_usable_score_is_unparsed(answer):
    [s] = score_replies(lambda ps: [answer for _ in ps], ["q"], ["r"])
    assert s.score is None and s.failure == "unparsed"


def test_judge_refusal_is_not_a_score():
    [s] = score_replies(lambda ps: [Reply(text="No.", refusal=True) for _ in ps], ["q"], ["r"])
    assert s.score is None and s.failure == "judge refusal"


def test_wrong_number_of_answers_is_an_error():
    with pytest.raises(ValueError, match="one answer per prompt"):
        score_replies(lambda ps: [], ["q"], ["r"])


def test_progress_is_reported_and_can_stop_the_batch():
    seen = []
    score_replies(
        scorer(),
        [f"q{i}" for i in range(20)],
        ["r"] * 20,
        progress=lambda d, t: seen.append((d, t)),
    )
    assert seen == [(16, 20), (20, 20)]

    def stop(done, total):
        raise KeyboardInterrupt

    judge = scorer()
    with pytest.raises(KeyboardInterrupt):
        score_replies(judge, [f"q{i}" for i in range(20)], ["r"] * 20, progress=stop)
    assert len(judge.calls) == 1


# -- coercing the judge --------------------------------------------------------------------------


def test_no_judge_without_a_key_says_what_to_pass():
    with pytest.raises(ValueError, match="judge_anthropic"):
        as_judge(None)


def test_no_judge_with_a_key_is_claude(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    f = as_judge(None)
    assert f.provider == "anthropic" and f.judge is True


def test_model_id_becomes_a_local_judge_and_functions_are_described_by_name():
    f = as_judge("dragonfarm/tiny-support")
    assert f.provider == "local" and f.judge and f.sampling["temperature"] == 0.0
    assert describe_judge(first_position) == {
        "provider": "function",
        "model": f"{__name__}.first_position",
    }
    with pytest.raises(TypeError, match="judge must be"):
        as_judge(42)


# -- pairwise ------------------------------------------------------------------------------------


def test_a_judge_always_preferring_the_first_position_gives_only_ties():
    verdicts = compare_replies(first_position, ["q1", "q2", "q3"], ["a", "b", "c"], ["x", "y", "z"])
    assert [v.outcome for v in verdicts] == ["tie", "tie", "tie"]
    assert all(v.picks == ("A", "A") for v in verdicts)


def test_a_consistent_judge_gives_wins_and_losses_through_the_swap():
    ours, theirs = ["GOOD one", "meh", "GOOD two"], ["bad", "GOOD three", "bad"]
    verdicts = compare_replies(prefers("GOOD"), ["q1", "q2", "q3"], ours, theirs)
    assert [v.outcome for v in verdicts] == ["win", "loss", "win"]
    assert verdicts[0].picks == ("A", "B") and verdicts[1].picks == ("B", "A")


def test_pairwise_refusal_is_not_judged_and_an_unparsed_answer_leaves_no_verdict():
    answers = iter(['{"winner": "A"}', "A is better", "still not json"])
    verdicts = compare_replies(
        lambda ps: [next(answers) for _ in ps],
        ["q1", "q2"],
        ["fine", Reply(text="", empty=True)],
        ["other", "other"],
    )
    assert verdicts[1].outcome is None and verdicts[1].failure == "ours: empty"
    assert verdicts[0].outcome is None and verdicts[0].failure == "unparsed"
    assert verdicts[0].picks == ("A", None)


# -- through the official clients ----------------------------------------------------------------


def test_rubric_scores_through_claude(monkeypatch):
    answers = iter(
        ['{"score": 9, "rationale": "great"}', "not json", '{"score": 3, "rationale": "weak"}']
    )
    with FakeAnthropic(answer=lambda prompt: {"text": next(answers)}) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        judge = dragon.judge_anthropic(max_active=1)
        scores = score_replies(judge, ["q1", "q2"], ["r1", "r2"])
    assert scores == [Score(9.0, "great", None), Score(3.0, "weak", None)]
    assert len(server.requests) == 3 and server.requests[2]["body"]["messages"][0][
        "content"
    ].endswith(REASK)
    assert server.requests[0]["body"]["system"].startswith("You are a careful evaluator")


def test_pairwise_through_an_openai_compatible_server():
    def answer(prompt):
        a = reply_of(prompt, "Reply A")
        return {"text": json.dumps({"winner": "A" if "tuned" in a else "B", "rationale": "r"})}

    with FakeOpenAI(answer=answer) as server:
        judge = dragon.judge_openai("judge-model", server.url)
        verdicts = compare_replies(judge, ["q1", "q2"], ["tuned 1", "tuned 2"], ["base", "base"])
    assert [v.outcome for v in verdicts] == ["win", "win"]
    assert len(server.requests) == 4


def test_openai_refusal_from_the_judge_is_recorded():
    with FakeOpenAI(answer=lambda p: {"refusal": True}) as server:
        [s] = score_replies(dragon.judge_openai("m", server.url), ["q"], ["r"])
    assert s.score is None and s.failure == "judge refusal"
