import doctest
import importlib
import math

import pytest

from dragonfarm_core.rewards.task_metrics import apply_metrics, metric_regex, metrics

# `dragon.metrics` is the function; the module has to be fetched by its full name.
metrics_module = importlib.import_module("dragonfarm_core.rewards.task_metrics")


def test_doctests_pass():
    result = doctest.testmod(metrics_module)
    assert result.attempted > 20 and result.failed == 0


def test_the_manual_examples():
    m = metrics()
    assert m["exact"]("Paris.", "paris", "Capital of France?") == 1.0
    assert m["token_f1"]("the cat sat on the mat", "a cat sat on a mat", "") == 1.0
    assert m["json_valid"]('```json\n{"a": 1}\n```', "", "") == 1.0


@pytest.mark.parametrize(
    "generated, reference, want",
    [
        ("Paris.", "paris", 1.0),
        ("  PARIS !", "Paris", 1.0),
        ("Paris\n is", "paris is", 1.0),
        ("Paris, France", "Paris", 0.0),
        ("", "", 1.0),
        ("Lyon", "Paris", 0.0),
    ],
)
def test_exact(generated, reference, want):
    assert metrics()["exact"](generated, reference, "") == want


@pytest.mark.parametrize(
    "generated, reference, want",
    [
        ("The capital is Lima.", "lima", 1.0),
        ("Limassol", "Lima", 0.0),
        ("I owe 14", "4", 0.0),
        ("It's written in C++ today", "c++", 1.0),
        ("anything", "", 0.0),
        ("New   York city", "new york", 1.0),
    ],
)
def test_contains(generated, reference, want):
    assert metrics()["contains"](generated, reference, "") == want


def test_token_f1():
    f1 = metrics()["token_f1"]
    assert f1("the cat sat on the mat", "a cat sat on a mat", "") == 1.0
    assert f1("cat", "dog", "") == 0.0
    assert f1("", "", "") == 1.0 and f1("cat", "", "") == 0.0
    # precision 1/2, recall 1/1 -> 2/3
    assert f1("cat dog", "cat", "") == pytest.approx(2 / 3)
    # repeated tokens count once per occurrence in both
    assert f1("cat cat cat", "cat", "") == pytest.approx(0.5)


@pytest.mark.parametrize(
    "generated, want",
    [
        ('{"a": 1}', 1.0),
        ("[1, 2, 3]", 1.0),
        ('```\n{"a": 1}\n```', 1.0),
        ('```json\n{"a": 1}\n```', 1.0),
        ("{'a': 1}", 0.0),
        ("Sure! {}", 0.0),
        ("", 0.0),
    ],
)
def test_json_valid(generated, want):
    assert metrics()["json_valid"](generated, "", "") == want


@pytest.mark.parametrize(
    "generated, reference, want",
    [
        ("The answer is 144.", "144", 1.0),
        ("total: 1,234", "1234", 1.0),
        ("-3.50", "-3.5", 1.0),
        ("between 3-4", "4", 1.0),
        ("12 then 13", "12", 0.0),
        ("no number", "5", 0.0),
        ("5", "no number", 0.0),
        ("1,2,3", "3", 1.0),
        ("2.5e3 units", "2500", 1.0),
    ],
)
def test_numeric(generated, reference, want):
    assert metrics()["numeric"](generated, reference, "") == want


def test_length_ratio():
    ratio = metrics()["length_ratio"]
    assert ratio("abcdef", "abc", "") == 2.0
    assert ratio("  ab  ", "abcd", "") == 0.5
    assert math.isnan(ratio("abc", "", ""))


def test_metric_regex():
    ticket = metric_regex(r"^T-\d{4}")
    assert ticket("t-1234 refunded", "", "") == 1.0
    assert ticket("Refunded T-1234", "", "") == 0.0
    assert metric_regex(r"^T-\d{4}", ignore_case=False)("t-1234", "", "") == 0.0
    with pytest.raises(ValueError, match="not a valid regex"):
        metric_regex("(")


def test_apply_metrics_accepts_names_functions_and_callables():
    gen, ref = ["Paris.", '{"a": 1}'], ["paris", "x"]
    out = apply_metrics(
        ["exact", metrics()["json_valid"], metric_regex("^p"), lambda g, r, p: len(g)],
        gen,
        ref,
        ["q1", "q2"],
    )
    assert out == {
        "exact": [1.0, 0.0],
        "json_valid": [0.0, 1.0],
        "regex": [1.0, 0.0],
        "<lambda>": [6.0, 8.0],
    }
    assert apply_metrics(metrics(), gen, ref)["token_f1"] == [1.0, 0.0]
    assert list(apply_metrics({"mine": "exact", "fmt": metric_regex("a")}, gen, ref)) == [
        "mine",
        "fmt",
    ]
    assert list(apply_metrics(["exact", "exact"], gen, ref)) == ["exact", "exact_2"]


def test_apply_metrics_errors_name_what_is_wrong():
    with pytest.raises(ValueError, match="Unknown metric 'bleu'"):
        apply_metrics(["bleu"], ["a"], ["a"])
    with pytest.raises(ValueError, match="1 references for 2"):
        apply_metrics(["exact"], ["a", "b"], ["a"])

    def broken(generated, reference, prompt):
        if generated == "b":
            raise RuntimeError("boom")
        return 1

    with pytest.raises(ValueError, match="'broken' failed on row 1: RuntimeError: boom"):
        apply_metrics([broken], ["a", "b"])
    with pytest.raises(ValueError, match="row 0"):
        apply_metrics([lambda g, r, p: "high"], ["a"])


def test_missing_references_and_prompts_read_as_empty():
    assert apply_metrics(["exact", "contains"], ["", "x"], [None, None]) == {
        "exact": [1.0, 0.0],
        "contains": [0.0, 0.0],
    }
