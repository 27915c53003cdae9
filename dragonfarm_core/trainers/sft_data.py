"""From data/*.jsonl conversations to token ids whose loss covers the last assistant turn only.

Every row is rendered with the chat template (the prompt with the assistant header, and the
whole conversation), then the whole texts go to the fast tokenizer's Rust backend in one
batched call (`fast_backend`; transformers' own call costs twice the time), or, for a tokenizer
where that provably gives the same ids (`_encodes_apart`), the prompts and the replies do. The
tokens before the end of the rendered prompt are context: their labels are masked. Because the
learned turn is always the last one, the mask is a prefix, so an example is its ids plus
`n_masked`. Rows longer than max_seq_len are truncated, keeping as much of the reply as
sensible, and counted. `load` keeps a run's encoded rows in an Arrow cache (token_cache), so a
rerun or a resume on unchanged data does not tokenize again.
"""

from __future__ import annotations

import bisect
import functools
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

from dragonfarm_core.chat_template import ROLES
from dragonfarm_core.rundir import files
from dragonfarm_core.trainers.common import DataError, ModelLoadError

IGNORE = -100


class TokenRows(Sequence[list[int]]):
    """Rows of token ids kept flat in numpy (a cached encoding maps its Arrow file: no list of
    tens of millions of Python ints is built); a row becomes a list when it is read."""

    def __init__(self, flat: Any, ends: Any) -> None:
        self.flat, self.ends = flat, ends

    def __len__(self) -> int:
        return len(self.ends)

    @overload
    def __getitem__(self, i: int) -> list[int]: ...
    @overload
    def __getitem__(self, i: slice) -> list[list[int]]: ...
    def __getitem__(self, i: int | slice) -> list[int] | list[list[int]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        return self.flat[self.ends[i - 1] if i else 0 : self.ends[i]].tolist()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def row_lengths(self) -> list[int]:
        return [int(n) for n in self.ends - [0, *self.ends[:-1]]] if len(self) else []


@dataclass
class Encoded:
    """Tokenized examples: ids per row, and how many leading tokens are masked context."""

    input_ids: Sequence[list[int]]
    n_masked: list[int]
    truncated_rows: int = 0

    def __len__(self) -> int:
        return len(self.input_ids)

    def labels(self, i: int) -> list[int]:
        ids = self.input_ids[i]
        return [IGNORE] * self.n_masked[i] + ids[self.n_masked[i] :]

    @property
    def lengths(self) -> list[int]:
        if isinstance(self.input_ids, TokenRows):
            return self.input_ids.row_lengths()
        return [len(ids) for ids in self.input_ids]

    @property
    def label_tokens(self) -> int:
        return sum(self.lengths) - sum(self.n_masked)


def _check_messages(messages: Any, where: str) -> list[dict[str, str]]:
    if not isinstance(messages, list) or not messages:
        raise DataError(f"{where}: 'messages' must be a non-empty list of {{role, content}}.")
    for m in messages:
        if (
            not isinstance(m, dict)
            or m.get("role") not in ROLES
            or not isinstance(m.get("content"), str)
        ):
            raise DataError(
                f"{where}: each message needs a role ({', '.join(ROLES)}) and a "
                f"text content; got {str(m)[:120]}."
            )
    if messages[-1]["role"] != "assistant":
        raise DataError(
            f"{where}: the last message must be the assistant turn to learn, "
            f"not {messages[-1]['role']!r}."
        )
    if not any(m["role"] == "user" for m in messages):
        raise DataError(f"{where}: the conversation has no user turn.")
    return messages


def read_rows(run_dir: str | os.PathLike[str], split: str) -> list[tuple[str, Any]]:
    """(where, parsed JSON) for each line of data/<split>.jsonl; no eval file means no rows.

    `where` ("<path>, line N") starts every error message about that row.
    """
    path = files.data_path(run_dir, split)
    if not path.is_file():
        if split == "eval":
            return []
        raise DataError(f"{path} is missing; the run was not written completely. Recreate the run.")
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}, line {n}"
            try:
                rows.append((where, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise DataError(f"{where} is not valid JSON ({exc.msg}).") from exc
    if split == "train" and not rows:
        raise DataError(f"{path} has no rows to train on.")
    return rows


def read_conversations(run_dir: str | os.PathLike[str], split: str) -> list[list[dict[str, str]]]:
    """The message lists of data/<split>.jsonl; a missing eval file means no held-out rows."""
    rows = []
    for where, record in read_rows(run_dir, split):
        if not isinstance(record, dict) or "messages" not in record:
            raise DataError(
                f"{where} has no 'messages' field; SFT needs {{\"messages\": [...]}} rows."
            )
        rows.append(_check_messages(record["messages"], where))
    return rows


def render(
    tokenizer: Any, conversations: list[list[dict[str, str]]]
) -> tuple[list[str], list[str]]:
    """(prompt texts ending with the assistant header, full texts) through the chat template."""
    if not conversations:
        return [], []
    if not tokenizer.chat_template:
        raise ModelLoadError(
            f"The tokenizer of {tokenizer.name_or_path} has no chat template; "
            "use an instruct/chat model or add a template to its tokenizer."
        )
    template = _compiled_template(tokenizer)
    if template is None or any(m.keys() - {"role", "content"} for c in conversations for m in c):
        prompts = tokenizer.apply_chat_template(
            [c[:-1] for c in conversations], tokenize=False, add_generation_prompt=True
        )
        fulls = tokenizer.apply_chat_template(conversations, tokenize=False)
    else:
        # As apply_chat_template passes them: tools and documents defined, as None.
        names = {"tools": None, "documents": None, **tokenizer.special_tokens_map}
        prompts = _render_each(template, [c[:-1] for c in conversations], True, names)
        fulls = _render_each(template, conversations, False, names)
    for i, (p, t) in enumerate(zip(prompts, fulls, strict=True)):
        if not t.startswith(p):
            raise ModelLoadError(
                f"The chat template of {tokenizer.name_or_path} renders row {i} "
                "differently with and without the reply, so the prompt cannot "
                "be masked; use a model whose template extends the prompt."
            )
    return prompts, fulls


def _compiled_template(tokenizer: Any) -> Any:
    """The tokenizer's chat template as transformers compiles it (its sandbox, its globals),
    to render rows of plain {role, content} strings with the variables apply_chat_template
    passes (messages, add_generation_prompt, the special tokens; tools and documents None).
    apply_chat_template first rebuilds every message out of plain JSON types, for rich
    objects (images, pydantic models) that checked rows never hold: rendering 20k rows of
    bench/data_prep.py (prompt and whole text, checks included) took 1.34 s that way and
    0.75 s this way. None where transformers no longer has the compiler: apply_chat_template then.
    tests/trainers/test_sft_data.py holds both ways equal."""
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError:
        return None
    return _compile_jinja_template(tokenizer.get_chat_template())


def _render_each(
    template: Any, conversations: list[list[dict[str, str]]], generation_prompt: bool,
    names: dict[str, Any],
) -> list[str]:  # fmt: skip
    """`template.render(messages=c, add_generation_prompt=..., **names)` for each conversation.

    render() copies the template's globals (a ChainMap of the template's and the
    environment's) into every row's context, twice; here they are merged once and each row's
    context is made from that (Template.new_context with shared=True: the dict as given, the
    globals in it). 20k rows of bench/data_prep.py, prompt and whole text: 0.42-0.47 s with
    render(), 0.19 s this way, the same strings.
    """
    base = {**template.globals, **names}
    concat, root = template.environment.concat, template.root_render_func
    texts = []
    try:
        for messages in conversations:
            context = {**base, "messages": messages, "add_generation_prompt": generation_prompt}
            texts.append(concat(root(template.new_context(context, shared=True))))
    except Exception:
        template.environment.handle_exception()  # what render() does: the template's lines
    return texts


def truncate(ids: list[int], n_masked: int, max_len: int) -> tuple[list[int], int]:
    """Fit a row into max_len, keeping as much of the reply as sensible.

    The prompt keeps its end (the turn the reply answers and the assistant header) and at
    least half the window unless it is shorter; the reply keeps its beginning.
    """
    n_reply = len(ids) - n_masked
    keep_prompt = min(n_masked, max(max_len - n_reply, max_len // 2))
    keep_reply = max_len - keep_prompt
    return ids[n_masked - keep_prompt : n_masked + keep_reply], keep_prompt


@dataclass(frozen=True)
class Backend:
    """The fast tokenizer's Rust backend as `tokenize` calls it (`fast_backend`)."""

    encoder: Any  # a tokenizers.Tokenizer
    apart: bool  # a row's prompt and reply encode on their own as in context (`_encodes_apart`)


def fast_backend(tokenizer: Any) -> tuple[Backend, str]:
    """(a copy of the fast tokenizer's Rust backend to call directly, the original's JSON).

    Calling the backend skips transformers' per-call wrapping, which cost about half the
    encoding time. The copy has no truncation or padding (as a plain tokenizer call without
    them), and where it is provably the same a Metaspace pre-tokenizer that keeps the whole
    text as one word is told to split it before each "▁": BPE then works on words, not on
    a whole conversation. No merge can cross that split when no vocabulary token holds "▁"
    after its first character (a merge always makes a vocabulary token), and no unknown
    characters fuse across it when "▁" itself is known, so the ids and offsets are unchanged
    (tests/trainers/test_sft_data.py checks them against transformers' own call).
    """
    from tokenizers import Tokenizer

    text = tokenizer.backend_tokenizer.to_str()
    spec = json.loads(text)
    spec["truncation"] = spec["padding"] = None
    pre, model = spec.get("pre_tokenizer") or {}, spec.get("model") or {}
    if (
        pre.get("type") == "Metaspace"
        and not pre.get("split")
        and _plain_bpe(model)
        and not any(pre["replacement"] in token[1:] for token in model.get("vocab", {}))
        and (pre["replacement"] in model.get("vocab", {}) or not model.get("fuse_unk"))
    ):
        pre["split"] = True
    return Backend(Tokenizer.from_str(json.dumps(spec)), _encodes_apart(spec)), text


def _plain_bpe(model: dict[str, Any]) -> bool:
    """A BPE model whose merges depend only on the characters of a word: no dropout, no
    whole-word lookup before the merges, no prefix or suffix marking a word's position."""
    return (
        model.get("type") == "BPE"
        and not model.get("dropout")
        and not model.get("ignore_merges")
        and not model.get("continuing_subword_prefix")
        and not model.get("end_of_word_suffix")
    )


def _encodes_apart(spec: dict[str, Any]) -> bool:
    """Whether, for this tokenizer (its JSON), a text's two parts encoded on their own give
    what the whole text gives wherever no token crosses the cut: then `tokenize` encodes a
    row's prompt and reply on their own, which is what it keeps anyway (see there).

    Why: with no normalizer, added tokens matched without stripping spaces or looking for word
    edges, and a Metaspace pre-tokenizer that splits before each "▁" and prepends none, the
    pieces of the whole text are the parts' pieces, the last of the prompt's joined to the first
    of the reply's unless the reply starts with "▁". Plain BPE on that joined piece takes the
    lowest-ranked adjacent pair each time (the leftmost of equals); if it never takes the pair
    across the cut, the merges on either side are those the side makes alone, in the same
    order. So where nothing crosses the cut, the tokens are the prompt's alone then the
    reply's alone; where something does, `tokenize` encodes them apart anyway. The parts need
    no offsets, and `encode_batch_fast` without them took 0.74 s for 10k rows of
    bench/data_prep.py against 1.29 s for the whole texts with them (the prompts 0.51 of it).
    The bundled model's tokenizer is of this kind; byte-level ones (their split rules look at
    the next character) are not.
    """
    pre, model = spec.get("pre_tokenizer") or {}, spec.get("model") or {}
    return (
        spec.get("normalizer") is None
        and pre.get("type") == "Metaspace"
        and bool(pre.get("split"))
        and pre.get("prepend_scheme") == "never"
        and _plain_bpe(model)
        and not any(
            token.get(flag)
            for token in spec.get("added_tokens") or []
            for flag in ("lstrip", "rstrip", "single_word")
        )
    )


def _prompt_tokens(encoding: Any, boundary: int) -> int | None:
    """How many tokens of `encoding` lie before character `boundary`; None where a token
    spans the boundary (a BPE merge of the assistant header's newline with the reply)."""
    token = encoding.char_to_token(boundary)
    if token is None:  # the boundary character made no token: count by offsets
        starts = [start for start, _ in encoding.offsets]
        n = bisect.bisect_left(starts, boundary)
        return None if n and encoding.offsets[n - 1][1] > boundary else n
    return token if encoding.token_to_chars(token)[0] == boundary else None


def tokenize(
    backend: Backend, prompts: list[str], fulls: list[str], max_len: int
) -> dict[str, list[Any]]:
    """Columns `input_ids`, `n_masked`, `truncated` for rendered rows (`render`).

    Tokenized in context, a row's prompt tokens are exactly what generation later sees, as
    long as no token spans the end of the prompt. Where one does, that row is tokenized as
    prompt + reply separately, so the prompt still matches what the model sees at inference.
    (For a tokenizer of `_encodes_apart`'s kind, every row is encoded that way: the same ids.)
    """
    out: dict[str, list[Any]] = {"input_ids": [], "n_masked": [], "truncated": []}
    for ids, n_masked in _encoded_rows(backend, prompts, fulls):
        truncated = len(ids) > max_len
        if truncated:
            ids, n_masked = truncate(ids, n_masked, max_len)
        out["input_ids"].append(ids)
        out["n_masked"].append(n_masked)
        out["truncated"].append(truncated)
    return out


def _encoded_rows(
    backend: Backend, prompts: list[str], fulls: list[str]
) -> Iterator[tuple[list[int], int]]:
    """(ids, how many of them are the prompt's) for each row, before truncation."""
    encoder = backend.encoder
    if backend.apart:  # what the whole text gives, without its offsets (_encodes_apart)
        replies = [full[len(prompt) :] for prompt, full in zip(prompts, fulls, strict=True)]
        heads = encoder.encode_batch_fast(prompts, add_special_tokens=False)
        tails = encoder.encode_batch_fast(replies, add_special_tokens=False)
        for head, tail in zip(heads, tails, strict=True):
            ids = head.ids
            yield ids + tail.ids, len(ids)
        return
    encodings = encoder.encode_batch(fulls, add_special_tokens=False)
    for prompt, full, encoding in zip(prompts, fulls, encodings, strict=True):
        n_masked = _prompt_tokens(encoding, len(prompt))
        if n_masked is None:
            head, tail = encoder.encode_batch(
                [prompt, full[len(prompt) :]], add_special_tokens=False
            )
            yield head.ids + tail.ids, len(head.ids)
        else:
            yield encoding.ids, n_masked


def encode(tokenizer: Any, conversations: list[list[dict[str, str]]], max_len: int) -> Encoded:
    """Tokenize rows in batched calls; mask everything before the learned turn; truncate."""
    prompts, fulls = render(tokenizer, conversations)
    if not fulls:
        return Encoded([], [])
    columns = tokenize(fast_backend(tokenizer)[0], prompts, fulls, max_len)
    return Encoded(columns["input_ids"], columns["n_masked"], sum(columns["truncated"]))


@dataclass
class SftData:
    """A run's rows as tokenized (for training and evaluation) and as read (for samples).

    The rows are read when first asked for: a cached encoding (token_cache) does not read
    the data files, and only the end of a run needs the conversations.
    """

    tokenizer: Any
    run_dir: Path
    train: Encoded
    held_out: Encoded

    @functools.cached_property
    def train_rows(self) -> list[list[dict[str, str]]]:
        return read_conversations(self.run_dir, "train")

    @functools.cached_property
    def eval_rows(self) -> list[list[dict[str, str]]]:
        return read_conversations(self.run_dir, "eval")

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id


def load(run_dir: str | os.PathLike[str], tokenizer: Any, max_len: int) -> SftData:
    """Tokenize data/train.jsonl and data/eval.jsonl, or load them from the run's cache."""
    from dragonfarm_core.trainers import token_cache

    train = token_cache.encode_split(run_dir, "train", tokenizer, max_len)
    held_out = token_cache.encode_split(run_dir, "eval", tokenizer, max_len)
    return SftData(tokenizer, Path(run_dir), train, held_out)
