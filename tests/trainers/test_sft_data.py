"""Tokenization for SFT: only the last assistant turn is learned, checked token by token."""

from __future__ import annotations

import bisect
import json
import random
from pathlib import Path

import pytest
from tokenizers import Tokenizer
from trainer_fixtures import support_conversations
from transformers import AutoTokenizer

from dragonfarm_core.rundir import files
from dragonfarm_core.trainers import sft_data
from dragonfarm_core.trainers.common import DataError
from dragonfarm_core.trainers.sft_data import IGNORE

BUNDLED = Path(__file__).resolve().parents[2] / "assets" / "models" / "tiny-support"


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def bundled_tokenizer(tiny_model_dir):
    """The bundled model's tokenizer (its Metaspace keeps a text whole: the split rewrite)."""
    return AutoTokenizer.from_pretrained(BUNDLED if BUNDLED.is_dir() else tiny_model_dir)


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _reference_encode(tokenizer, conversations, max_len):
    """The encoder as it was before the Rust backend was called directly: transformers' own
    batched call with offsets, the prompt end found by bisecting the token starts."""
    prompts, fulls = sft_data.render(tokenizer, conversations)
    batch = tokenizer(fulls, add_special_tokens=False, return_offsets_mapping=True)
    out = sft_data.Encoded([], [])
    for prompt, full, ids, offsets in zip(
        prompts, fulls, batch["input_ids"], batch["offset_mapping"], strict=True
    ):
        boundary = len(prompt)
        n = bisect.bisect_left([start for start, _ in offsets], boundary)
        if n and offsets[n - 1][1] > boundary:
            head, tail = _ids(tokenizer, prompt), _ids(tokenizer, full[boundary:])
            ids, n = head + tail, len(head)
        if len(ids) > max_len:
            ids, n = sft_data.truncate(ids, n, max_len)
            out.truncated_rows += 1
        out.input_ids.append(ids)
        out.n_masked.append(n)
    return out


def varied_conversations(n: int) -> list[list[dict[str, str]]]:
    """Support rows, multi-turn rows, system prompts, odd characters and spacing, an empty
    reply, and the reply that makes a token span the prompt end."""
    rng = random.Random(3)
    words = [
        "router",
        "reset",
        "",
        "light\tcable",
        "héllo",
        "日本語",
        "🙂",
        "ok?!",
        "a\n\nb",
        "",
        "",
        "spaced",
    ]
    rows = [r["messages"] for r in support_conversations(n)]
    for i in range(n):
        turns = [{"role": "system", "content": "Be brief."}] if i % 3 == 0 else []
        for _ in range(1 + i % 3):
            turns.append({"role": "user", "content": " ".join(rng.choices(words, k=9))})
            turns.append({"role": "assistant", "content": " ".join(rng.choices(words, k=12))})
        rows.append(turns)
    rows.append(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "\nMy router"}]
    )
    rows.append([{"role": "user", "content": "x"}, {"role": "assistant", "content": ""}])
    rows.append([{"role": "user", "content": " lead"}, {"role": "assistant", "content": " 🙂  "}])
    return rows


@pytest.mark.parametrize("which", ["tiny", "bundled"])
@pytest.mark.parametrize("max_len", [4096, 40])
def test_encoding_is_the_same_as_transformers_own_call(
    tokenizer, bundled_tokenizer, which, max_len
):
    tok = tokenizer if which == "tiny" else bundled_tokenizer
    conversations = varied_conversations(60)
    expected = _reference_encode(tok, conversations, max_len)
    got = sft_data.encode(tok, conversations, max_len)
    assert got.input_ids == expected.input_ids
    assert got.n_masked == expected.n_masked
    assert got.truncated_rows == expected.truncated_rows
    assert (max_len == 40) == (got.truncated_rows > 0)
    # The bundled tokenizer encodes prompt and reply apart; the tiny (byte-level) one does not.
    assert sft_data.fast_backend(tok)[0].apart == (which == "bundled" and BUNDLED.is_dir())


def _cut_texts(n: int) -> list[tuple[str, str]]:
    """Random texts cut in two: words, spaces, newlines, special tokens, odd characters."""
    rng = random.Random(5)
    bits = ["router", "re", "set", " ", "  ", "\n", "\n\n", "<|im_start|>", "<|im_end|>",
            "assistant", "héllo", "日本", "🙂", "?!", "\t", "▁", "a", "ing", "My"]  # fmt: skip
    texts = ["".join(rng.choices(bits, k=rng.randint(1, 12))) for _ in range(n)]
    return [(t[:cut], t[cut:]) for t in texts for cut in {rng.randint(0, len(t)), len(t) // 2}]


def _spans(encoding, cut: int) -> bool:
    return any(start < cut < end for start, end in encoding.offsets)


@pytest.mark.skipif(not BUNDLED.is_dir(), reason="needs the bundled model's tokenizer")
def test_parts_encoded_apart_are_the_whole_text_s_tokens_where_nothing_crosses_the_cut(
    bundled_tokenizer,
):
    backend = sft_data.fast_backend(bundled_tokenizer)[0]
    assert backend.apart
    encoder, crossed = backend.encoder, 0
    for head, tail in _cut_texts(400):
        whole = encoder.encode(head + tail, add_special_tokens=False)
        if _spans(whole, len(head)):
            crossed += 1
            continue
        apart = encoder.encode_batch_fast([head, tail], add_special_tokens=False)
        assert apart[0].ids + apart[1].ids == whole.ids, (head, tail)
    assert 0 < crossed < 400  # both kinds of cut were tried


@pytest.mark.skipif(not BUNDLED.is_dir(), reason="needs the bundled model's tokenizer")
@pytest.mark.parametrize(
    "change",
    ["prepend_first", "single_word_token", "strip_normalizer", "rstrip_token", "byte_level"],
)
def test_tokenizers_whose_parts_encode_otherwise_are_encoded_whole(bundled_tokenizer, change):
    from tokenizers import Tokenizer

    spec = json.loads(sft_data.fast_backend(bundled_tokenizer)[0].encoder.to_str())
    if change == "prepend_first":
        spec["pre_tokenizer"]["prepend_scheme"] = "first"
    elif change.endswith("_token"):
        flag = change.removesuffix("_token")
        next(t for t in spec["added_tokens"] if t["content"] == "<|im_start|>")[flag] = True
    elif change == "strip_normalizer":
        spec["normalizer"] = {"type": "Strip", "strip_left": True, "strip_right": True}
    else:
        spec["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False,
                                 "trim_offsets": True, "use_regex": True}  # fmt: skip
    assert not sft_data._encodes_apart(spec)
    if change in ("prepend_first", "single_word_token", "strip_normalizer"):  # other ids
        encoder = Tokenizer.from_str(json.dumps(spec))
        differ = 0
        for head, tail in _cut_texts(200):
            whole = encoder.encode(head + tail, add_special_tokens=False)
            apart = encoder.encode_batch_fast([head, tail], add_special_tokens=False)
            differ += not _spans(whole, len(head)) and apart[0].ids + apart[1].ids != whole.ids
        assert differ


# A template that reads the special tokens, `tools` (None, not undefined) and transformers'
# raise_exception.
BOS_TEMPLATE = (
    "{{ bos_token }}{% if tools is not none %}TOOLS{% endif %}{% for m in messages %}{% if m['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('bad role') }}{% endif %}<|{{ m['role'] }}|>{{ m['content'] | trim }}"
    "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.mark.parametrize("which", ["tiny", "bundled", "bos"])
def test_rows_render_as_apply_chat_template_renders_them(tokenizer, bundled_tokenizer, which):
    tok = tokenizer if which == "tiny" else bundled_tokenizer
    if which == "bos":
        tok = AutoTokenizer.from_pretrained(tok.name_or_path)
        tok.chat_template = BOS_TEMPLATE
    conversations = varied_conversations(40)
    # A message with another key goes through apply_chat_template itself.
    named = [
        {"role": "user", "content": "hi", "name": "ann"},
        {"role": "assistant", "content": "ok"},
    ]
    for rows in (conversations, [*conversations, named]):
        prompts, fulls = sft_data.render(tok, rows)
        assert prompts == tok.apply_chat_template(
            [c[:-1] for c in rows], tokenize=False, add_generation_prompt=True
        )
        assert fulls == tok.apply_chat_template(rows, tokenize=False)
    if which == "bos":
        assert fulls[0].startswith(tok.bos_token)


def test_a_template_s_own_error_reaches_the_caller(bundled_tokenizer):
    from jinja2.exceptions import TemplateError

    tok = AutoTokenizer.from_pretrained(bundled_tokenizer.name_or_path)
    tok.chat_template = BOS_TEMPLATE
    odd = [[{"role": "robot", "content": "beep"}, {"role": "assistant", "content": "ok"}]]
    with pytest.raises(TemplateError, match="bad role"):
        tok.apply_chat_template(odd, tokenize=False)
    with pytest.raises(TemplateError, match="bad role"):
        sft_data.render(tok, varied_conversations(3) + odd)


def test_metaspace_is_split_only_where_no_token_holds_the_replacement_inside(bundled_tokenizer):
    if BUNDLED.is_dir():  # the bundled tokenizer keeps a text whole: the rewrite applies
        backend, _ = sft_data.fast_backend(bundled_tokenizer)
        assert json.loads(backend.encoder.to_str())["pre_tokenizer"]["split"] is True
    spec = json.loads(bundled_tokenizer.backend_tokenizer.to_str())
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never",
                             "split": False}  # fmt: skip
    spec["model"]["vocab"]["x▁y"] = len(spec["model"]["vocab"]) + 100

    class WithInnerReplacement:
        backend_tokenizer = Tokenizer.from_str(json.dumps(spec))

    backend, _ = sft_data.fast_backend(WithInnerReplacement())
    assert json.loads(backend.encoder.to_str())["pre_tokenizer"]["split"] is False


def test_labels_mask_prompt_and_learn_reply_token_by_token(tokenizer):
    conversations = [r["messages"] for r in support_conversations(30)]
    data = sft_data.encode(tokenizer, conversations, max_len=4096)
    prompts, fulls = sft_data.render(tokenizer, conversations)
    assert data.truncated_rows == 0
    for i, (prompt, full) in enumerate(zip(prompts, fulls, strict=True)):
        ids, labels, n = data.input_ids[i], data.labels(i), data.n_masked[i]
        # The masked prefix is exactly the prompt as generation tokenizes it.
        assert ids[:n] == _ids(tokenizer, prompt)
        assert labels[:n] == [IGNORE] * n
        assert labels[n:] == ids[n:]
        reply = full[len(prompt) :]
        assert reply == conversations[i][-1]["content"] + "<|im_end|>\n"
        assert tokenizer.decode(ids[n:]).replace(" ", "") == reply.replace(" ", "")


def test_earlier_turns_are_context(tokenizer):
    conversation = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "My router will not turn on."},
        {"role": "assistant", "content": "Check the plug."},
        {"role": "user", "content": "It is plugged in."},
        {"role": "assistant", "content": "Hold the reset button for ten seconds."},
    ]
    data = sft_data.encode(tokenizer, [conversation], max_len=4096)
    learned = tokenizer.decode([t for t in data.labels(0) if t != IGNORE])
    assert "reset button" in learned
    assert "Check" not in learned and "plugged" not in learned and "brief" not in learned
    assert learned.rstrip().endswith("<|im_end|>")


def test_a_token_spanning_the_prompt_end_still_leaves_the_prompt_intact(tokenizer):
    # This tokenizer merges "\n\nMy" into one token, across the assistant header's newline.
    conversation = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "\nMy router"},
    ]
    prompts, fulls = sft_data.render(tokenizer, [conversation])
    in_context = _ids(tokenizer, fulls[0])
    data = sft_data.encode(tokenizer, [conversation], max_len=4096)
    ids, n = data.input_ids[0], data.n_masked[0]
    assert ids != in_context  # the spanning path was taken
    assert ids[:n] == _ids(tokenizer, prompts[0])
    assert "My router" in tokenizer.decode(ids[n:])


def test_truncation_keeps_prompt_end_and_reply_start():
    ids = list(range(100))
    # Long prompt (80), short reply (20): the whole reply fits.
    kept, n = sft_data.truncate(ids, 80, 50)
    assert len(kept) == 50 and n == 30 and kept[:n] == ids[50:80] and kept[n:] == ids[80:]
    # Long reply: the prompt keeps half the window, the reply its beginning.
    kept, n = sft_data.truncate(ids, 40, 50)
    assert n == 25 and kept[:n] == ids[15:40] and kept[n:] == ids[40:65]
    # Short prompt: all of it, and the reply fills the rest.
    kept, n = sft_data.truncate(ids, 10, 50)
    assert n == 10 and kept == ids[:50]


def test_long_rows_are_truncated_and_counted(tokenizer):
    conversations = [r["messages"] for r in support_conversations(20)]
    full = sft_data.encode(tokenizer, conversations, max_len=4096)
    data = sft_data.encode(tokenizer, conversations, max_len=48)
    too_long = sum(1 for n in full.lengths if n > 48)
    assert too_long > 0
    assert data.truncated_rows == too_long
    assert max(data.lengths) <= 48
    assert all(len(ids) > m for ids, m in zip(data.input_ids, data.n_masked, strict=True))


def _write(run_dir, lines):
    path = files.data_path(run_dir, "train")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "line 2 is not valid JSON"),
        ('{"prompt": "x"}', "line 2 has no 'messages'"),
        ('{"messages": [{"role": "user", "content": "x"}]}', "last message must be the assistant"),
        ('{"messages": [{"role": "bot", "content": "x"}]}', "each message needs a role"),
        ('{"messages": [{"role": "assistant", "content": "x"}]}', "no user turn"),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path, line, message):
    good = json.dumps(
        {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}
    )
    _write(tmp_path, [good, line])
    with pytest.raises(DataError, match=message) as info:
        sft_data.read_conversations(tmp_path, "train")
    assert "train.jsonl" in str(info.value)


def test_missing_files(tmp_path):
    with pytest.raises(DataError, match="train.jsonl is missing"):
        sft_data.read_conversations(tmp_path, "train")
    assert sft_data.read_conversations(tmp_path, "eval") == []
    _write(tmp_path, [""])
    with pytest.raises(DataError, match="no rows"):
        sft_data.read_conversations(tmp_path, "train")
