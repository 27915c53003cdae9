"""report(): counts, duplicates, near duplicates, lengths and tokens, truncation."""

from __future__ import annotations

import json
import random
import string

import pandas as pd
import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from dragonfarm_core.data import DataReport, DatasetError, dataset
from dragonfarm_core.data.neardup import near_duplicates


@pytest.fixture
def word_tokenizer(tmp_path) -> Tokenizer:
    """One token per whitespace-separated word or punctuation mark; saved in tmp_path/model."""
    tok = Tokenizer(WordLevel({"[UNK]": 0, "hello": 1, "world": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    (tmp_path / "model").mkdir()
    tok.save(str(tmp_path / "model" / "tokenizer.json"))
    return tok


def test_report_counts_empties_duplicates_and_estimated_lengths():
    df = pd.DataFrame(
        {
            "q": ["How do I reset it?", "How do I reset it?", "Other", None, "x" * 40],
            "a": ["Hold the button.", "Hold the button.", "Yes", "No", "y" * 40],
        }
    )
    report = dataset(df).map(prompt="q", response="a").report(max_seq_len=16)
    assert isinstance(report, DataReport)
    assert (report.n_rows, report.n_usable, report.empty) == (5, 4, {"prompt": 1, "response": 0})
    assert report.exact_duplicates == 1 and report.near_duplicates == 0
    # "x"*40 + "\n\n" + "y"*40 is the longest: 82 characters, 21 estimated tokens.
    assert report.chars["max"] == 82 and report.chars["min"] == len("Other\n\nYes")
    assert report.tokens_estimated and report.tokens["max"] == 21 and report.tokenizer is None
    assert report.truncated_rows == 1 and any("characters / 4" in n for n in report.notes)


def test_near_duplicate_prompts_are_found_with_their_rows():
    prompts = [
        "My thermostat keeps dropping off the Wi-Fi every single night, please help.",
        "How do I cancel my subscription before it renews?",
        "My thermostat keeps dropping of the WiFi every single night - please help!",
        "The doorbell battery is empty after two days.",
        "how do i cancel my subscription before it renews",
    ]
    df = pd.DataFrame({"q": prompts, "a": [f"reply {i}" for i in range(5)]})
    report = dataset(df).map(prompt="q", response="a").report()
    assert report.near_duplicates == 2
    assert [(a, b) for a, b, _ in report.near_duplicate_rows] == [(1, 3), (2, 5)]
    assert report.near_duplicate_rows[1][2] == 100.0  # equal after normalisation


def test_near_duplicates_scale_to_ten_thousand_rows():
    rng = random.Random(0)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 8))) for _ in range(2000)]
    texts = [" ".join(rng.choices(words, k=rng.randint(20, 60))) for _ in range(10_000)]
    planted = {}
    for i in range(0, 10_000, 500):
        j = i + 250
        texts[j] = texts[i].replace(" ", "  ", 3) + " ok"  # a small edit
        planted[j] = i
    found = {b: a for a, b, _ in near_duplicates(texts)}
    assert found == planted


def test_near_duplicates_still_found_when_shingles_are_sampled(monkeypatch):
    from dragonfarm_core.data import neardup

    monkeypatch.setattr(neardup, "MAX_SHINGLES", 100)  # forces the sampling path
    texts = [
        "the doorbell battery drains within two days of charging it fully",
        "how do i export all of my data before closing the account",
        "the doorbell battery drains within 2 days of charging it fully",
        "ok",
    ]
    assert [(a, b) for a, b, _ in near_duplicates(texts)] == [(0, 2)]


def test_tokenizer_from_folder_counts_exact_tokens(tmp_path, word_tokenizer):
    df = pd.DataFrame({"q": ["hello world", "hello"], "a": ["world world world", "hello"]})
    ds = dataset(df).map(prompt="q", response="a")
    report = ds.report(tokenizer=tmp_path / "model", max_seq_len=4)
    # Row 1 is "hello world" + "world world world" = 5 tokens, row 2 "hello" + "hello" = 2.
    assert (report.tokens["min"], report.tokens["median"], report.tokens["max"]) == (2, 3.5, 5)
    assert report.tokens["p95"] == pytest.approx(4.85, abs=0.051)
    assert not report.tokens_estimated and report.tokenizer.endswith("tokenizer.json")
    assert report.truncated_rows == 1
    same = ds.report(tokenizer=str(tmp_path / "model" / "tokenizer.json"), max_seq_len=4)
    assert same.tokens == report.tokens


def test_tokenizer_object_is_not_changed_and_its_truncation_ignored(word_tokenizer):
    word_tokenizer.enable_truncation(max_length=2)
    df = pd.DataFrame({"q": ["hello world hello"], "a": ["world"]})
    report = dataset(df).map(prompt="q", response="a").report(tokenizer=word_tokenizer)
    assert report.tokens["max"] == 4 and report.tokenizer == "the given tokenizer"
    assert word_tokenizer.truncation is not None  # the caller's object is untouched


def test_pairs_measure_the_longer_reply_and_count_identical_pairs():
    df = pd.DataFrame(
        {"q": ["p", "p2"], "good": ["short", "same"], "bad": ["a much longer reply", "same"]}
    )
    report = dataset(df).map_pairs(prompt="q", chosen="good", rejected="bad").report()
    assert report.identical_pairs == 1 and report.n_usable == 1
    assert report.chars["max"] == len("p\n\na much longer reply")
    assert "chosen = rejected | 1" in report.to_markdown()


def test_unmapped_report_measures_raw_rows():
    df = pd.DataFrame({"a": ["x", "x", None], "b": ["y", "y", " "]})
    report = dataset(df).report()
    assert report.kind is None and report.empty == {"a": 1, "b": 1}
    assert report.exact_duplicates == 1 and "Not mapped yet" in report.notes[0]


def test_markdown_dict_and_repr(tickets_csv):
    report = dataset(tickets_csv).map(prompt="{subject}\n\n{body}", response="reply").report()
    md = report.to_markdown()
    assert md.startswith("### Data report: tickets") and "| rows | 25 (25 usable) |" in md
    assert "| length in tokens (estimated as characters / 4) |" in md
    data = report.to_dict()
    assert json.loads(json.dumps(data)) == data and data["n_rows"] == 25
    assert repr(report).splitlines()[0] == "DataReport 'tickets': 25 rows, 25 usable"


def test_bad_tokenizer_and_max_seq_len(tmp_path, tickets_csv):
    ds = dataset(tickets_csv).map(prompt="subject", response="reply")
    with pytest.raises(DatasetError, match="no tokenizer.json there"):
        ds.report(tokenizer=tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(DatasetError, match="not a readable tokenizer.json"):
        ds.report(tokenizer=tmp_path / "tokenizer.json")
    with pytest.raises(DatasetError, match="max_seq_len"):
        ds.report(max_seq_len=0)


def test_markdown_has_a_header_row_and_names_the_tokenizer_by_its_model(tmp_path, word_tokenizer):
    df = pd.DataFrame({"q": ["one two", "three"], "a": ["four", "five six seven"]})
    md = (
        dataset(df).map(prompt="q", response="a").report(tokenizer=tmp_path / "model").to_markdown()
    )
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert table[0] == "| measure | value |"  # a real header, not an empty bar above the rows
    assert "| | |" not in md
    assert "| length in tokens (counted with the tokenizer of model) |" in md
    assert str(tmp_path) not in md  # an internal path is no row label


def test_tokens_are_counted_a_batch_at_a_time(monkeypatch, word_tokenizer):
    """A million rows' encodings at once (ids, pieces, offsets) were most of the Mapping tab's
    peak memory (bench/upload_memory.py); a batch at a time, only the counts are kept."""
    from dragonfarm_core.data import report as report_module

    class Counting:  # what count_tokens uses of a tokenizers.Tokenizer, recording batch sizes
        def __init__(self, tok: Tokenizer) -> None:
            self.tok, self.sizes = tok, []

        def no_truncation(self) -> None: ...

        def no_padding(self) -> None: ...

        def encode_batch_fast(self, texts, add_special_tokens):
            self.sizes.append(len(texts))
            return self.tok.encode_batch_fast(texts, add_special_tokens=add_special_tokens)

    monkeypatch.setattr(report_module, "TOKEN_BATCH", 4)
    counting = Counting(word_tokenizer)
    assert report_module.count_tokens(["hello world"] * 10 + ["hello"], counting) == [2] * 10 + [1]
    assert counting.sizes == [4, 4, 3]
