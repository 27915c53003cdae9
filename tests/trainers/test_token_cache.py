"""The run's Arrow cache of tokenized rows: the same ids as encoding, reused only when nothing
they depend on changed."""

from __future__ import annotations

import json

import pytest
from trainer_fixtures import support_conversations
from transformers import AutoTokenizer

from dragonfarm_core.rundir import files
from dragonfarm_core.trainers import sft_data, token_cache
from dragonfarm_core.trainers.common import DataError
from dragonfarm_core.trainers.sft_data import Encoded, TokenRows


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture
def run_dir(tmp_path):
    rows = support_conversations(40)
    files.write_jsonl(files.data_path(tmp_path, "train"), rows[:30])
    files.write_jsonl(files.data_path(tmp_path, "eval"), rows[30:])
    return tmp_path


@pytest.fixture
def tokenized(monkeypatch):
    """How many times rows were tokenized (sft_data.tokenize calls, one per batch)."""
    calls = []
    real = sft_data.tokenize

    def counting(*args, **kwargs):
        calls.append(len(args[1]))
        return real(*args, **kwargs)

    monkeypatch.setattr(sft_data, "tokenize", counting)
    return calls


def _cache_files(run_dir):
    return sorted(p.name for p in files.token_cache_dir(run_dir).iterdir())


def _same(a: Encoded, b: Encoded) -> None:
    assert a.input_ids == b.input_ids and a.n_masked == b.n_masked
    assert a.truncated_rows == b.truncated_rows and a.lengths == b.lengths


def test_load_gives_encode_s_ids_and_a_rerun_reads_them_from_the_cache(
    run_dir, tokenizer, tokenized
):
    train = [r["messages"] for r in support_conversations(40)][:30]
    expected = sft_data.encode(tokenizer, train, max_len=48)
    assert expected.truncated_rows > 0
    tokenized.clear()

    first = sft_data.load(run_dir, tokenizer, max_len=48)
    _same(first.train, expected)
    assert tokenized and sum(tokenized) == 40  # 30 train rows, 10 held-out
    names = _cache_files(run_dir)
    assert [n.split("-")[0] for n in names] == ["eval", "train"]
    assert all(n.endswith(".arrow") for n in names)

    tokenized.clear()
    again = sft_data.load(run_dir, tokenizer, max_len=48)
    assert tokenized == []  # nothing tokenized: both splits came from the Arrow files
    _same(again.train, first.train)
    _same(again.held_out, first.held_out)
    assert again.train_rows == train  # the rows themselves are read when asked for
    assert len(again.eval_rows) == 10


def test_changed_data_or_settings_tokenize_again_and_replace_the_old_file(
    run_dir, tokenizer, tokenized
):
    sft_data.load(run_dir, tokenizer, max_len=64)
    before = _cache_files(run_dir)

    tokenized.clear()
    sft_data.load(run_dir, tokenizer, max_len=32)  # another max_seq_len
    assert tokenized
    after_len = _cache_files(run_dir)
    assert len(after_len) == 2 and set(after_len).isdisjoint(before)

    rows = support_conversations(31)
    rows[-1]["messages"][-1]["content"] = "A new reply."
    files.write_jsonl(files.data_path(run_dir, "train"), rows)  # one row more, one changed
    tokenized.clear()
    data = sft_data.load(run_dir, tokenizer, max_len=32)
    assert sum(tokenized) == 31  # only train: the held-out file did not change
    assert len(data.train) == 31
    assert "new reply" in tokenizer.decode(data.train.input_ids[-1])
    assert len(_cache_files(run_dir)) == 2


def test_the_garbage_collector_is_paused_while_encoding_and_as_it_was_after(
    run_dir, tokenizer, monkeypatch
):
    import gc

    seen = []
    real = sft_data.tokenize
    monkeypatch.setattr(sft_data, "tokenize", lambda *a: seen.append(gc.isenabled()) or real(*a))
    assert gc.isenabled()
    sft_data.load(run_dir, tokenizer, max_len=64)
    assert seen == [False, False] and gc.isenabled()  # train and eval, one batch each
    path = files.data_path(run_dir, "train")
    path.write_text(path.read_text(encoding="utf-8") + "{not json\n", encoding="utf-8")
    with pytest.raises(DataError):
        sft_data.load(run_dir, tokenizer, max_len=64)
    assert gc.isenabled()
    gc.disable()
    try:
        token_cache.encode_split(run_dir, "eval", tokenizer, 32)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_bad_rows_are_reported_by_line_and_nothing_is_cached(run_dir, tokenizer):
    path = files.data_path(run_dir, "train")
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[4] = json.dumps({"messages": [{"role": "user", "content": "no reply"}]})
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"train\.jsonl, line 5: the last message must be"):
        sft_data.load(run_dir, tokenizer, max_len=64)
    assert not files.token_cache_dir(run_dir).exists()


def test_missing_and_empty_files(tmp_path, tokenizer):
    with pytest.raises(DataError, match="train.jsonl is missing"):
        token_cache.encode_split(tmp_path, "train", tokenizer, 64)
    assert len(token_cache.encode_split(tmp_path, "eval", tokenizer, 64)) == 0
    files.data_path(tmp_path, "eval").parent.mkdir(parents=True)
    files.data_path(tmp_path, "eval").write_text("\n", encoding="utf-8")
    assert len(token_cache.encode_split(tmp_path, "eval", tokenizer, 64)) == 0


def test_a_new_tokenizer_is_a_new_key(run_dir, tokenizer):
    path = files.data_path(run_dir, "train")
    _, text = sft_data.fast_backend(tokenizer)
    key = token_cache.cache_key(path, tokenizer, text, 64)
    assert key == token_cache.cache_key(path, tokenizer, text, 64)
    assert key != token_cache.cache_key(path, tokenizer, text.replace("▁", "_"), 64)
    assert key != token_cache.cache_key(path, tokenizer, text, 65)


def test_token_rows_read_like_lists():
    import numpy as np

    rows = TokenRows(np.array([1, 2, 3, 4, 5, 6], dtype=np.int32), np.array([2, 2, 6]))
    assert len(rows) == 3 and rows[0] == [1, 2] and rows[1] == [] and rows[-1] == [3, 4, 5, 6]
    assert rows[1:] == [[], [3, 4, 5, 6]] and rows == [[1, 2], [], [3, 4, 5, 6]]
    assert rows.row_lengths() == [2, 0, 4]
    with pytest.raises(IndexError):
        rows[3]
    data = Encoded(rows, [1, 0, 2])
    assert data.labels(2) == [-100, -100, 5, 6] and data.lengths == [2, 0, 4]
    assert data.label_tokens == 3


def test_an_unreadable_cache_file_is_tokenized_again(run_dir, tokenizer, tokenized):
    first = sft_data.load(run_dir, tokenizer, max_len=64)
    train_file = next(files.token_cache_dir(run_dir).glob("train-*.arrow"))
    train_file.write_bytes(b"not arrow")
    tokenized.clear()
    again = sft_data.load(run_dir, tokenizer, max_len=64)
    assert sum(tokenized) == 30  # train tokenized again; the held-out file was fine
    _same(again.train, first.train)
