import dataclasses
import json
import shlex
import sys

import pytest

from dragonfarm_core.rewards import Reward, RewardError, assign_names, reward

PY = sys.executable


def test_defaults_follow_the_manual():
    r = reward("exact")
    assert (r.weight, r.name, r.pattern, r.case_sensitive, r.keys, r.min_chars, r.max_chars) == (
        1,
        None,
        None,
        False,
        None,
        None,
        None,
    )
    assert (r.words, r.mode, r.command, r.input, r.score_from) == (
        None,
        "any",
        None,
        "stdin",
        "exit_code",
    )
    assert (r.min_score, r.max_score, r.timeout, r.file, r.fn) == (0, 1, 30, None, "reward")
    assert r.label == "exact" and r.needs_reference
    assert not reward("json").needs_reference


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"type": "bleu"}, "type"),
        ({"type": "exact", "weight": float("nan")}, "weight"),
        ({"type": "exact", "weight": "2"}, "weight"),
        ({"type": "exact", "name": "has space"}, "name"),
        ({"type": "regex"}, "pattern"),
        ({"type": "regex", "pattern": "("}, "pattern"),
        ({"type": "json", "keys": []}, "keys"),
        ({"type": "json", "keys": ["id", ""]}, "keys"),
        ({"type": "length", "min_chars": -1}, "min_chars"),
        ({"type": "length", "max_chars": 2.5}, "max_chars"),
        ({"type": "length", "min_chars": 10, "max_chars": 5}, "min_chars"),
        ({"type": "keyword"}, "words"),
        ({"type": "keyword", "words": ["a"], "mode": "most"}, "mode"),
        ({"type": "command"}, "command"),
        ({"type": "command", "command": [PY], "input": "pipe"}, "input"),
        ({"type": "command", "command": [PY], "score_from": "stderr"}, "score_from"),
        ({"type": "command", "command": [PY], "min_score": 5, "max_score": 5}, "max_score"),
        ({"type": "command", "command": [PY], "timeout": 0}, "timeout"),
        ({"type": "custom"}, "file"),
        ({"type": "exact", "pattern": "x"}, "pattern"),
        ({"type": "regex", "pattern": "x", "max_chars": 4}, "max_chars"),
    ],
)
def test_bad_settings_name_the_field(kwargs, field):
    with pytest.raises(RewardError, match=f"Reward.{field}"):
        Reward(**kwargs)


def test_length_needs_a_bound():
    with pytest.raises(RewardError, match="min_chars, max_chars"):
        reward("length")


def test_unused_option_says_which_types_use_it():
    with pytest.raises(RewardError, match="only by regex, keyword"):
        reward("json", case_sensitive=True)


def test_lists_become_tuples_and_a_single_string_is_one_item():
    assert reward("keyword", words="refund").words == ("refund",)
    assert reward("json", keys=["a", "b"]).keys == ("a", "b")


def test_round_trip_through_config_json(tmp_path):
    for r in (
        reward("exact", weight=0.5),
        reward("regex", pattern="^T-", case_sensitive=True),
        reward("json", keys=["id"]),
        reward("length", min_chars=1, max_chars=9),
        reward("keyword", words=["a", "b"], mode="all", name="kw"),
        reward(
            "command",
            command=shlex.join([PY, "-c", "print(1)"]),
            score_from="stdout",
            min_score=-1,
            max_score=3,
            timeout=5,
        ),
    ):
        assert Reward.from_dict(json.loads(json.dumps(r.to_dict()))) == r


def test_from_dict_rejects_unknown_fields():
    with pytest.raises(RewardError, match="unknown fields"):
        Reward.from_dict({"type": "exact", "bonus": 1})


def test_names_default_to_the_type_numbered_when_repeated():
    named = assign_names(
        [
            reward("regex", pattern="a"),
            reward("exact"),
            reward("regex", pattern="b"),
            reward("regex", pattern="c", name="regex_2"),
        ]
    )
    assert [r.name for r in named] == ["regex", "exact", "regex_3", "regex_2"]
    with pytest.raises(RewardError, match="same name"):
        assign_names([reward("exact", name="a"), reward("contains", name="a")])


def test_every_field_has_ui_metadata():
    for f in dataclasses.fields(Reward):
        assert f.metadata["label"] and f.metadata["help"], f.name
