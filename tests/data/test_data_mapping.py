"""map / map_pairs / map_prompts: record shapes, dropped rows, and immutability."""

from __future__ import annotations

import warnings

import pandas as pd
import pytest

from dragonfarm_core.data import DatasetError, DatasetWarning, Mapping, dataset


def frame(**cols: list) -> pd.DataFrame:
    return pd.DataFrame(cols)


def test_sft_records_with_literal_and_column_system():
    ds = dataset(frame(q=["a", "b"], r=["A", "B"], sys=["S1", None]))
    recs = ds.map(prompt="q", response="r", system="You are helpful.").records()
    assert recs[0] == {
        "messages": [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "A"},
        ]
    }
    # A system column that is empty for a row only leaves that row's system turn out.
    recs = ds.map(prompt="q", response="r", system="sys").records()
    assert [m["role"] for m in recs[1]["messages"]] == ["user", "assistant"]
    assert recs[0]["messages"][0] == {"role": "system", "content": "S1"}


def test_pairs_records_are_trl_conversational():
    ds = dataset(frame(q=["2+2?"], good=["4"], bad=["5"])).map_pairs(
        "q", "good", "bad", system="Sys"
    )
    assert ds.mapping == Mapping("pairs", prompt="q", chosen="good", rejected="bad", system="Sys")
    assert ds.records() == [
        {
            "prompt": [{"role": "system", "content": "Sys"}, {"role": "user", "content": "2+2?"}],
            "chosen": [{"role": "assistant", "content": "4"}],
            "rejected": [{"role": "assistant", "content": "5"}],
        }
    ]


def test_prompts_records_carry_other_columns_as_fields():
    df = frame(
        question=["12*12?", "Peru?"], answer=["144", "Lima"], id=["1", None], topic=["m", "g"]
    )
    recs = dataset(df).map_prompts(prompt="Q: {question}", reference="answer").records()
    assert recs[0] == {
        "prompt": [{"role": "user", "content": "Q: 12*12?"}],
        "reference": "144",
        "fields": {"id": "1", "topic": "m"},
    }
    assert recs[1]["fields"] == {"id": None, "topic": "g"}
    no_ref = dataset(df).map_prompts(prompt="question").records()
    assert no_ref[0]["reference"] is None and set(no_ref[0]["fields"]) == {"answer", "id", "topic"}


def test_empty_mapped_cells_are_dropped_with_a_counting_warning(tickets_csv, write):
    path = write("gaps.csv", "q,r\na,A\n,B\nc,\nd,D\n  ,E\n")
    ds = dataset(path).map(prompt="q", response="r")
    with pytest.warns(DatasetWarning) as caught:
        recs = ds.records()
    assert len(recs) == 2
    msg = str(caught[0].message)
    assert str(path) in msg and "dropped 3 of 5 rows" in msg
    assert "2 with an empty prompt ('q'): rows 2, 5" in msg
    assert "1 with an empty response ('r'): row 3" in msg


def test_template_row_is_dropped_when_any_of_its_columns_is_empty():
    ds = dataset(frame(s=["S", "S2"], b=["B", None], r=["R", "R2"]))
    with pytest.warns(DatasetWarning, match="1 with an empty prompt"):
        recs = ds.map(prompt="{s}: {b}", response="r").records()
    assert len(recs) == 1


def test_every_row_empty_is_refused(write):
    ds = dataset(write("e.csv", "q,r\na,\nb,\n")).map(prompt="q", response="r")
    with pytest.raises(
        DatasetError, match=r"e\.csv: none of the 2 rows is usable \(2 with an empty response"
    ):
        ds.records()


def test_identical_pairs_are_dropped_and_all_identical_refused():
    ds = dataset(frame(q=["a", "b", "c"], c=["x", "y ", "z"], r=["x", "y", "w"]))
    with pytest.warns(
        DatasetWarning, match="2 whose chosen and rejected replies are identical: rows 1, 2"
    ):
        recs = ds.map_pairs("q", "c", "r").records()
    assert [r["prompt"][0]["content"] for r in recs] == ["c"]
    same = dataset(frame(q=["a"], c=["x"], r=["x"])).map_pairs("q", "c", "r")
    with pytest.raises(DatasetError, match="none of the 1 rows is usable"):
        same.records()


def test_missing_reference_drops_the_row():
    ds = dataset(frame(q=["a", "b"], ref=["1", None])).map_prompts("q", reference="ref")
    with pytest.warns(DatasetWarning, match=r"1 with an empty reference \('ref'\): row 2"):
        assert len(ds.records()) == 1


def test_clean_data_raises_no_warning(tickets_csv):
    ds = dataset(tickets_csv).map(prompt="{subject}\n\n{body}", response="reply")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(ds.records()) == 25


def test_datasets_are_immutable_and_remappable(tickets_csv):
    base = dataset(tickets_csv)
    mapped = base.map(prompt="subject", response="reply")
    assert base.mapping is None and mapped.mapping.kind == "sft"
    remapped = mapped.map_prompts(prompt="body")
    assert mapped.mapping.kind == "sft" and remapped.mapping.kind == "prompts"
    with pytest.raises(AttributeError):
        mapped.name = "other"


def test_unmapped_dataset_says_how_to_map(tickets_csv):
    with pytest.raises(
        DatasetError, match=r"not mapped yet.*\.map\(prompt='subject', response='reply'\)"
    ):
        dataset(tickets_csv).records()


def test_empty_strings_are_not_a_mapping(tickets_csv):
    with pytest.raises(DatasetError, match="prompt= must be a column name or a template"):
        dataset(tickets_csv).map(prompt="", response="reply")
    with pytest.raises(DatasetError, match="system= must be a column name or a template"):
        dataset(tickets_csv).map(prompt="subject", response="reply", system="")


def test_mapping_rejects_unknown_kind():
    with pytest.raises(DatasetError, match="Mapping.kind='chat'"):
        Mapping("chat")


def test_repr_is_a_short_summary(tickets_csv):
    text = repr(dataset(tickets_csv).map(prompt="{subject}\n\n{body}", response="reply"))
    assert text.splitlines() == [
        "Dataset 'tickets' (csv, 25 rows)",
        "  columns: subject, body, first name, reply",
        "  mapping: sft  prompt='{subject}\\n\\n{body}'  response='reply'",
        "  split:   5% held out, seed 42 (default; none under 20 rows)",
    ]
    assert "mapping: none yet" in repr(dataset(tickets_csv))
