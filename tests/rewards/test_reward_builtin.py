import doctest
import importlib

import pytest

from dragonfarm_core.rewards import reward, score_one

MODULES = ["builtin", "checks", "command", "custom", "scoring", "spec"]


@pytest.mark.parametrize("module", MODULES)
def test_doctests_pass(module):
    result = doctest.testmod(importlib.import_module(f"dragonfarm_core.rewards.{module}"))
    assert result.failed == 0


def one(r, completion, reference=None):
    return score_one(r, "prompt", completion, reference, {})


def test_exact_contains_numeric_compare_with_the_reference():
    assert one(reward("exact"), "  Lima. ", "lima") == 1.0
    assert one(reward("exact"), "It is Lima", "lima") == 0.0
    assert one(reward("contains"), "It is Lima.", "lima") == 1.0
    assert one(reward("contains"), "Limassol", "lima") == 0.0
    assert one(reward("numeric"), "12 * 12 = 144", "144") == 1.0
    assert one(reward("numeric"), "That makes 1,234 in all.", "1234.0") == 1.0
    assert one(reward("numeric"), "-3.50", "-3.5") == 1.0
    assert one(reward("numeric"), "144 or 145", "144") == 0.0


def test_regex():
    r = reward("regex", pattern=r"^T-\d{4}", weight=2)
    assert one(r, "t-1234 refunded") == 1.0
    assert one(r, "refunded T-1234") == 0.0
    assert one(reward("regex", pattern="^T-", case_sensitive=True), "t-1") == 0.0


def test_json_partial_credit_per_key():
    r = reward("json", keys=["id", "status"])
    assert one(r, '{"id": 1, "status": "open", "x": 0}') == 1.0
    assert one(r, '```json\n{"id": 1}\n```') == 0.5
    assert one(r, '{"nested": {"id": 1, "status": 2}}') == 0.0
    assert one(r, '["id", "status"]') == 0.0
    assert one(r, "{id: 1}") == 0.0
    assert one(reward("json"), "[1, 2]") == 1.0
    assert one(reward("json"), "Here: {}") == 0.0


def test_length_is_one_inside_and_falls_linearly_outside():
    r = reward("length", min_chars=100, max_chars=200)
    assert one(r, "x" * 100) == one(r, "x" * 200) == one(r, "x" * 150) == 1.0
    assert one(r, "x" * 50) == 0.5 and one(r, "") == 0.0
    assert one(r, "x" * 300) == 0.5 and one(r, "x" * 400) == 0.0 and one(r, "x" * 5000) == 0.0
    assert one(r, "  " + "x" * 100 + "\n\n") == 1.0  # surrounding whitespace is not counted
    assert one(reward("length", max_chars=0), "") == 1.0
    assert one(reward("length", max_chars=0), "x") == 0.0


def test_keyword_any_all_whole_words_and_case():
    any_ = reward("keyword", words=["refund", "credit"])
    all_ = reward("keyword", words=["refund", "credit"], mode="all")
    assert one(any_, "We sent a REFUND.") == 1.0
    assert one(all_, "We sent a refund.") == 0.0
    assert one(all_, "A refund and a credit.") == 1.0
    assert one(any_, "refunded, credited") == 0.0
    assert one(reward("keyword", words="Refund", case_sensitive=True), "refund") == 0.0
    assert one(reward("keyword", words=["C++"]), "I write C++.") == 1.0


def test_conversational_completions_are_read_as_their_last_message():
    completion = [{"role": "assistant", "content": "144"}]
    assert (
        score_one(reward("numeric"), [{"role": "user", "content": "12*12"}], completion, "144", {})
        == 1.0
    )
