"""judge_agreement: a judge checked against the person's Chat feedback (feedback/events.jsonl,
written here through the feedback store's own `record_event`)."""

from __future__ import annotations

import doctest
import json
import math
import re

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.conversation.feedback_store import record_event
from dragonfarm_core.judging import kappa as kappa_module
from dragonfarm_core.judging.feedback_cases import feedback_cases
from dragonfarm_core.judging.kappa import cohen_kappa


def _user(prompt: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}]


def rate(runs_dir, prompt: str, reply: str, verdict: str, run: str | None = None) -> None:
    record_event(runs_dir, kind="rating", messages=_user(prompt), reply=reply, verdict=verdict,
                 run=run)  # fmt: skip


def edit(runs_dir, prompt: str, reply: str, edited: str) -> None:
    record_event(runs_dir, kind="edit", messages=_user(prompt), reply=reply, edited=edited)


def _between(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0]


def keyword_judge(word: str, calls: list[int] | None = None):
    """A consistent judge: prefers (pairwise) or scores 9 (rubric) a reply containing `word`,
    scores 2 one without it. `calls` counts the prompts it was asked."""

    def judge(questions):
        if calls is not None:
            calls.append(len(questions))
        out = []
        for q in questions:
            if "[Reply A]\n" in q:
                a = word in _between(q, "[Reply A]\n", "\n\n[Reply B]")
                out.append({"winner": "A" if a else "B", "rationale": f"{word} in A: {a}"})
            else:
                reply = _between(q, "[Assistant's reply]\n", "\n\nAnswer with")
                out.append({"score": 9 if word in reply else 2, "rationale": "keyword"})
        return out

    return judge


def always_a(questions):
    return [{"winner": "A", "rationale": "the first one"} for _ in questions]


def liked_and_disliked_pairs(runs_dir, k: int) -> None:
    """k prompts, each with a liked ("good") and a disliked ("bad") reply: k pairs."""
    for i in range(k):
        rate(runs_dir, f"question {i}?", f"good answer {i}", "up")
        rate(runs_dir, f"question {i}?", f"bad answer {i}", "down")


# -- kappa ---------------------------------------------------------------------------------------


def test_kappa_and_its_interval_match_a_hand_computed_table():
    # 50 cases, person's label (rows) against the judge's (columns):
    #            judge y  judge n
    #   human y     20        5      row share .5
    #   human n     10       15      row share .5
    #   column share .6     .4
    # po = (20 + 15) / 50 = .7; pe = .5 * .6 + .5 * .4 = .5; kappa = (.7 - .5) / (1 - .5) = .4.
    # Fleiss-Cohen-Everitt variance, p_ij = count / 50:
    #   diagonal: .4 (1 - 1.1 * .6)^2 + .3 (1 - .9 * .6)^2 = .4 * .1156 + .3 * .2116 = .10972
    #   off:      (1 - .4)^2 [.1 (.6 + .5)^2 + .2 (.4 + .5)^2] = .36 * .283 = .10188
    #   minus:    (.4 - .5 * .6)^2 = .01
    #   var = (.10972 + .10188 - .01) / (50 * .5^2) = .2016 / 12.5 = .016128; se = .126996
    #   95 %: .4 -+ 1.959964 * .126996 = [.15109, .64891]
    pairs = [("y", "y")] * 20 + [("y", "n")] * 5 + [("n", "y")] * 10 + [("n", "n")] * 15
    k = cohen_kappa(pairs)
    assert (k.observed, k.expected, k.n) == (pytest.approx(0.7), pytest.approx(0.5), 50)
    assert k.kappa == pytest.approx(0.4)
    assert k.se == pytest.approx(math.sqrt(0.016128), rel=1e-9)
    assert k.ci95 == (pytest.approx(0.15109, abs=1e-5), pytest.approx(0.64891, abs=1e-5))


def test_the_kappa_modules_doctest_holds():
    assert doctest.testmod(kappa_module).failed == 0


def test_kappa_is_undefined_when_both_always_say_the_same_and_zero_when_nothing_matches():
    assert cohen_kappa([("A", "A")] * 5).kappa is None
    assert cohen_kappa([]).kappa is None
    # The judge only ever says "tie", which the person never does: no agreement, none expected.
    assert cohen_kappa([("A", "tie"), ("B", "tie")]).kappa == 0.0


def test_the_same_table_through_judge_agreement(llm_runs_dir):
    # 25 liked and 25 disliked replies, each to its own prompt (rubric cases); the judge
    # likes ("yes") 20 of the liked and 10 of the disliked: the table above.
    for i in range(50):
        liked = i < 25
        says_yes = i < 20 or 25 <= i < 35
        rate(llm_runs_dir, f"q{i}", f"reply {i} {'yes' if says_yes else 'no'}",
             "up" if liked else "down")  # fmt: skip
    with pytest.warns(UserWarning, match="Low agreement"):
        a = dragon.judge_agreement(keyword_judge("yes"), runs_dir=llm_runs_dir)
    s = a.summary
    assert (s["n"], s["judged"], s["rubric_n"], s["pairwise_n"]) == (50, 50, 50, 0)
    assert a.accuracy == pytest.approx(0.7)
    assert a.kappa == pytest.approx(0.4)
    assert s["kappa_ci95"] == [pytest.approx(0.15109, abs=1e-5), pytest.approx(0.64891, abs=1e-5)]
    assert "Fleiss" in s["kappa_interval"]
    assert "Low agreement" in a.warning and "fewer than" not in a.warning
    assert len(a.disagreements) == 15
    assert set(a.disagreements["human"]) == {"liked", "disliked"}


# -- judges good, bad and biased -----------------------------------------------------------------


def test_a_judge_that_always_says_a_has_position_bias_one_and_agrees_at_chance(llm_runs_dir):
    liked_and_disliked_pairs(llm_runs_dir, 24)
    with pytest.warns(UserWarning, match="Low agreement"):
        a = dragon.judge_agreement(always_a, runs_dir=llm_runs_dir)
    s = a.summary
    assert s["pairwise_n"] == 24 and s["rubric_n"] == 0
    # The fixed order does not follow the person's choice: "A" preferred in some pairs, "B" in
    # others, so a judge that always takes A would look right about half the time without the swap.
    assert set(a.cases["human"]) == {"A", "B"}
    assert s["position_bias"] == 1.0 and s["position_bias_n"] == 48
    assert s["flip_rate"] == 1.0 and s["flips"] == 24
    assert set(a.cases["verdict"]) == {"tie"}
    assert a.kappa == 0.0  # chance
    assert a.accuracy == 0.0  # a tie never counts as agreeing
    assert len(a.disagreements) == 24


def test_a_perfect_judge_on_pairs_edits_and_single_ratings(llm_runs_dir):
    liked_and_disliked_pairs(llm_runs_dir, 10)
    for i in range(6):
        edit(llm_runs_dir, f"fix {i}", f"bad draft {i}", f"good rewrite {i}")
    for i in range(4):
        rate(llm_runs_dir, f"single {i}", f"good one {i}", "up")
        rate(llm_runs_dir, f"lonely {i}", f"bad one {i}", "down")
    a = dragon.judge_agreement(keyword_judge("good"), runs_dir=llm_runs_dir)
    s = a.summary
    assert (s["n"], s["pairwise_n"], s["rubric_n"]) == (24, 16, 8)
    assert sorted(a.cases["source"].value_counts().items()) == [("edit", 6), ("rating", 18)]
    assert (a.accuracy, a.kappa) == (1.0, 1.0)
    assert s["position_bias"] == pytest.approx(0.5) and s["flip_rate"] == 0.0
    assert a.warning is None and a.disagreements.empty


def test_an_inverted_judge_disagrees_everywhere_and_is_warned_about(llm_runs_dir):
    liked_and_disliked_pairs(llm_runs_dir, 12)
    for i in range(10):
        rate(llm_runs_dir, f"single {i}", f"{'good' if i % 2 else 'bad'} {i}",
             "up" if i % 2 else "down")  # fmt: skip
    with pytest.warns(UserWarning, match="Low agreement"):
        a = dragon.judge_agreement(keyword_judge("bad"), runs_dir=llm_runs_dir)
    # No case agrees (po = 0): kappa is as low as the two raters' rates allow, -pe / (1 - pe).
    pe = a.summary["chance_agreement"]
    assert a.accuracy == 0.0 and 0 < pe < 1
    assert a.kappa == pytest.approx(-pe / (1 - pe))
    row = a.disagreements.iloc[0]
    assert row["prompt"] == "question 0?"
    assert {row["reply_a"], row["reply_b"]} == {"good answer 0", "bad answer 0"}
    assert row["verdict"] != row["human"] and "bad in A" in row["rationale"]


# -- the feedback read ---------------------------------------------------------------------------


def test_no_feedback_is_a_clear_error_that_says_how_to_get_some(llm_runs_dir):
    with pytest.raises(ValueError, match=r"No feedback to measure the judge against.*Chat"):
        dragon.judge_agreement(always_a, runs_dir=llm_runs_dir)
    rate(llm_runs_dir, "q", "a reply", "up", run="run-a")
    with pytest.raises(ValueError, match="No feedback for run run-b"):
        dragon.judge_agreement(always_a, runs_dir=llm_runs_dir, run="run-b")


def test_too_few_cases_give_a_warning_even_when_the_judge_is_right(llm_runs_dir):
    liked_and_disliked_pairs(llm_runs_dir, 5)
    with pytest.warns(UserWarning, match=r"Measured on 5 cases, fewer than 20"):
        a = dragon.judge_agreement(keyword_judge("good"), runs_dir=llm_runs_dir)
    assert a.accuracy == 1.0 and "Low agreement" not in a.warning
    assert "Rate more replies in Chat" in a.warning


def test_an_edit_is_a_pair_unless_the_original_was_liked_later(llm_runs_dir):
    edit(llm_runs_dir, "p", "first draft", "the rewrite")
    edit(llm_runs_dir, "q", "kept draft", "another rewrite")
    rate(llm_runs_dir, "q", "kept draft", "up")
    cases, damaged = feedback_cases(llm_runs_dir)
    assert damaged == []
    pair = next(c for c in cases if c.mode == "pairwise")
    preferred = pair.reply_a if pair.human == "A" else pair.reply_b
    assert (pair.prompt, pair.source, preferred) == ("p", "edit", "the rewrite")
    # q: the original was liked after the edit, so both are liked replies on their own.
    assert sorted((c.reply_a, c.human) for c in cases if c.prompt == "q") == [
        ("another rewrite", "liked"), ("kept draft", "liked")]  # fmt: skip


@pytest.mark.filterwarnings("ignore:Kappa is undefined")
def test_run_and_n_choose_the_cases(llm_runs_dir):
    for i in range(30):
        rate(llm_runs_dir, f"q{i}", f"good {i}", "up", run="run-a" if i < 20 else "run-b")
    with pytest.warns(UserWarning, match="Kappa is undefined"):
        only_b = dragon.judge_agreement(keyword_judge("good"), runs_dir=llm_runs_dir, run="run-b")
    assert set(only_b.cases["run"]) == {"run-b"} and only_b.summary["n"] == 10
    some = dragon.judge_agreement(keyword_judge("good"), runs_dir=llm_runs_dir, n=7, seed=1)
    again = dragon.judge_agreement(keyword_judge("good"), runs_dir=llm_runs_dir, n=7, seed=1)
    assert len(some.cases) == 7 and list(some.cases["id"]) == list(again.cases["id"])
    with pytest.raises(ValueError, match="threshold"):
        dragon.judge_agreement(always_a, runs_dir=llm_runs_dir, threshold=11)
    with pytest.raises(ValueError, match="n = 0"):
        dragon.judge_agreement(always_a, runs_dir=llm_runs_dir, n=0)


# -- the cache, the record -----------------------------------------------------------------------


def test_a_second_call_is_answered_from_the_cache_without_asking_the_judge(llm_runs_dir):
    liked_and_disliked_pairs(llm_runs_dir, 20)
    calls: list[int] = []
    judge = keyword_judge("good", calls)
    first = dragon.judge_agreement(judge, runs_dir=llm_runs_dir)
    asked = sum(calls)
    assert asked == 40 and not first.cached  # 20 pairs, each asked in both orders
    second = dragon.judge_agreement(judge, runs_dir=llm_runs_dir)
    assert sum(calls) == asked and second.cached
    assert second.summary == first.summary
    assert list(second.disagreements.columns) == list(first.disagreements.columns)
    # What the app shows beside a judge: the latest measured, read without a call.
    latest = dragon.last_agreement(judge, llm_runs_dir)
    assert latest is not None and latest.kappa == 1.0 and sum(calls) == asked
    assert dragon.last_agreement(first.summary["judge"], llm_runs_dir).kappa == 1.0
    assert dragon.last_agreement(always_a, llm_runs_dir) is None
    # New feedback is a new question; cache=False asks again.
    rate(llm_runs_dir, "new", "good new", "up")
    dragon.judge_agreement(judge, runs_dir=llm_runs_dir)
    assert sum(calls) == asked + 40 + 1
    dragon.judge_agreement(judge, runs_dir=llm_runs_dir, cache=False)
    assert sum(calls) == asked + 2 * (40 + 1)


def test_the_result_reads_well_and_is_json(llm_runs_dir):
    liked_and_disliked_pairs(llm_runs_dir, 2)
    rate(llm_runs_dir, "one", "good one", "up")
    with pytest.warns(UserWarning):
        a = dragon.judge_agreement(keyword_judge("good"), runs_dir=llm_runs_dir)
    text = repr(a)
    assert re.search(r"accuracy 100%, kappa 1\.00 \(n=3\)", text)
    assert "position bias 0.50" in text and "warning: Measured on 3 cases" in text
    stored = json.loads(json.dumps(a.to_dict()))
    assert stored["summary"]["kappa"] == 1.0 and len(stored["cases"]) == 3
    assert stored["judge"]["provider"] == "function"
