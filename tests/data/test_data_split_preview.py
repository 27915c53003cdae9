"""split(): deterministic held-out rows; preview(): message lists, printed."""

from __future__ import annotations

import pandas as pd
import pytest

from dragonfarm_core.data import DatasetError, conversations, dataset


def numbered(n: int):
    df = pd.DataFrame({"q": [f"q{i}" for i in range(n)], "a": [f"a{i}" for i in range(n)]})
    return dataset(df).map(prompt="q", response="a")


def prompts_of(records) -> list[str]:
    return [r["messages"][0]["content"] for r in records]


def test_default_split_holds_out_five_percent_from_twenty_rows():
    train, held = numbered(100).split_records()
    assert (len(train), len(held)) == (95, 5)
    assert sorted(prompts_of(train) + prompts_of(held)) == sorted(f"q{i}" for i in range(100))
    train, held = numbered(20).split_records()
    assert (len(train), len(held)) == (19, 1)


def test_no_default_hold_out_under_twenty_rows():
    train, held = numbered(19).split_records()
    assert len(train) == 19 and held == []


def test_explicit_split_holds_out_at_least_one_row_even_when_small():
    train, held = numbered(5).split(eval_frac=0.05).split_records()
    assert (len(train), len(held)) == (4, 1)
    train, held = numbered(5).split(eval_frac=0.9).split_records()
    assert (len(train), len(held)) == (1, 4)  # never everything
    train, held = numbered(50).split(eval_frac=0).split_records()
    assert (len(train), len(held)) == (50, 0)


def test_split_is_deterministic_and_depends_on_seed():
    a = numbered(200).split(eval_frac=0.1, seed=7)
    assert a.split_records() == numbered(200).split(eval_frac=0.1, seed=7).split_records()
    other = prompts_of(numbered(200).split(eval_frac=0.1, seed=8).split_records()[1])
    assert prompts_of(a.split_records()[1]) != other
    # Train rows keep the file's order.
    train = prompts_of(a.split_records()[0])
    assert train == sorted(train, key=lambda p: int(p[1:]))


def test_split_returns_a_new_dataset():
    ds = numbered(30)
    split = ds.split(eval_frac=0.2, seed=1)
    assert (ds.eval_frac, ds.seed, ds.split_set) == (0.05, 42, False)
    assert (split.eval_frac, split.seed, split.split_set) == (0.2, 1, True)
    assert "20% held out, seed 1" in repr(split) and "default" not in repr(split)


@pytest.mark.parametrize(
    ("frac", "seed"), [(1.0, 42), (-0.1, 42), ("0.1", 42), (0.1, -1), (0.1, 1.5)]
)
def test_split_rejects_bad_values(frac, seed):
    with pytest.raises(DatasetError, match="eval_frac|seed"):
        numbered(30).split(eval_frac=frac, seed=seed)


def test_explicit_split_of_a_single_row_is_refused():
    with pytest.raises(DatasetError, match=r"1 usable row.*split\(eval_frac=0\)"):
        numbered(1).split(eval_frac=0.5).split_records()


def test_preview_returns_and_prints_message_lists(capsys):
    ds = dataset(pd.DataFrame({"q": ["Line 1\nLine 2", "b"], "a": ["A", "B"]}))
    out = ds.map(prompt="q", response="a", system="Be brief.").preview(n=1)
    assert out == [
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Line 1\nLine 2"},
            {"role": "assistant", "content": "A"},
        ]
    ]
    printed = capsys.readouterr().out
    assert printed.splitlines() == [
        "dataframe: 1 of 2 rows",
        "--- example 1 ---",
        "system:",
        "  Be brief.",
        "user:",
        "  Line 1",
        "  Line 2",
        "assistant:",
        "  A",
    ]


def test_preview_of_pairs_prompts_and_conversations(capsys):
    df = pd.DataFrame({"q": ["2+2?"], "good": ["4"], "bad": ["5"]})
    pairs = dataset(df).map_pairs(prompt="q", chosen="good", rejected="bad").preview()
    assert [m["role"] for m in pairs[0]] == ["user", "chosen", "rejected"]
    prompts = dataset(df).map_prompts(prompt="q", reference="good").preview()
    assert prompts[0][-1] == {"role": "reference", "content": "4"}
    chats = [
        [{"role": "user", "content": f"u{i}"}, {"role": "assistant", "content": "a"}]
        for i in range(5)
    ]
    assert len(conversations(chats).preview()) == 3
    assert "--- example 3 ---" in capsys.readouterr().out
