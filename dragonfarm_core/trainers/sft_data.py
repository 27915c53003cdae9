"""From data/*.jsonl conversations to token ids whose loss covers the last assistant turn only.

Fast path: render every row with the chat template first (prompt and full text), then one
batched call of the fast tokenizer with offsets (per-row `apply_chat_template(tokenize=True)`
is about 2.5x slower). The tokens before the end of the rendered prompt are context: their
labels are masked. Because the learned turn is always the last one, the mask is a prefix, so
an example is its ids plus `n_masked`. Rows longer than max_seq_len are truncated, keeping
as much of the reply as sensible, and counted.
"""

from __future__ import annotations

import bisect
import json
import os
from dataclasses import dataclass
from typing import Any

from dragonfarm_core.chat_template import ROLES
from dragonfarm_core.rundir import files
from dragonfarm_core.trainers.common import DataError, ModelLoadError

IGNORE = -100


@dataclass
class Encoded:
    """Tokenized examples: ids per row, and how many leading tokens are masked context."""

    input_ids: list[list[int]]
    n_masked: list[int]
    truncated_rows: int = 0

    def __len__(self) -> int:
        return len(self.input_ids)

    def labels(self, i: int) -> list[int]:
        ids = self.input_ids[i]
        return [IGNORE] * self.n_masked[i] + ids[self.n_masked[i] :]

    @property
    def lengths(self) -> list[int]:
        return [len(ids) for ids in self.input_ids]

    @property
    def label_tokens(self) -> int:
        return sum(len(ids) - m for ids, m in zip(self.input_ids, self.n_masked, strict=True))


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
    prompts = tokenizer.apply_chat_template(
        [c[:-1] for c in conversations], tokenize=False, add_generation_prompt=True
    )
    fulls = tokenizer.apply_chat_template(conversations, tokenize=False)
    for i, (p, t) in enumerate(zip(prompts, fulls, strict=True)):
        if not t.startswith(p):
            raise ModelLoadError(
                f"The chat template of {tokenizer.name_or_path} renders row {i} "
                "differently with and without the reply, so the prompt cannot "
                "be masked; use a model whose template extends the prompt."
            )
    return prompts, fulls


def truncate(ids: list[int], n_masked: int, max_len: int) -> tuple[list[int], int]:
    """Fit a row into max_len, keeping as much of the reply as sensible.

    The prompt keeps its end (the turn the reply answers and the assistant header) and at
    least half the window unless it is shorter; the reply keeps its beginning.
    """
    n_reply = len(ids) - n_masked
    keep_prompt = min(n_masked, max(max_len - n_reply, max_len // 2))
    keep_reply = max_len - keep_prompt
    return ids[n_masked - keep_prompt : n_masked + keep_reply], keep_prompt


def _split_at_prompt(
    tokenizer: Any, fulls: list[str], prompts: list[str]
) -> tuple[list[list[int]], list[int]]:
    """Token ids of each full text and how many of them belong to its prompt.

    Tokenized in context, a row's prompt tokens are exactly what generation later sees, as
    long as no token spans the end of the prompt. Where one does (a BPE merge of the assistant
    header's newline with the reply's first word), that row is tokenized as prompt + reply
    separately, so the prompt still matches what the model sees at inference.
    """
    batch = tokenizer(fulls, add_special_tokens=False, return_offsets_mapping=True)
    all_ids, n_masked, spanning = [], [], []
    for i, (ids, offsets) in enumerate(
        zip(batch["input_ids"], batch["offset_mapping"], strict=True)
    ):
        boundary = len(prompts[i])
        n = bisect.bisect_left([start for start, _ in offsets], boundary)
        if n and offsets[n - 1][1] > boundary:
            spanning.append(i)
        all_ids.append(ids)
        n_masked.append(n)
    if spanning:
        heads = tokenizer([prompts[i] for i in spanning], add_special_tokens=False)["input_ids"]
        tails = tokenizer(
            [fulls[i][len(prompts[i]) :] for i in spanning], add_special_tokens=False
        )["input_ids"]
        for i, head, tail in zip(spanning, heads, tails, strict=True):
            all_ids[i], n_masked[i] = head + tail, len(head)
    return all_ids, n_masked


def encode(tokenizer: Any, conversations: list[list[dict[str, str]]], max_len: int) -> Encoded:
    """Tokenize rows in batched calls; mask everything before the learned turn; truncate."""
    prompts, fulls = render(tokenizer, conversations)
    out = Encoded([], [])
    if not fulls:
        return out
    for ids, n_masked in zip(*_split_at_prompt(tokenizer, fulls, prompts), strict=True):
        if len(ids) > max_len:
            ids, n_masked = truncate(ids, n_masked, max_len)
            out.truncated_rows += 1
        out.input_ids.append(ids)
        out.n_masked.append(n_masked)
    return out


@dataclass
class SftData:
    """A run's rows as read (for samples) and as tokenized (for training and evaluation)."""

    tokenizer: Any
    train_rows: list[list[dict[str, str]]]
    eval_rows: list[list[dict[str, str]]]
    train: Encoded
    held_out: Encoded

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id


def load(run_dir: str | os.PathLike[str], tokenizer: Any, max_len: int) -> SftData:
    """Read data/train.jsonl and data/eval.jsonl and tokenize both."""
    train_rows = read_conversations(run_dir, "train")
    eval_rows = read_conversations(run_dir, "eval")
    return SftData(
        tokenizer,
        train_rows,
        eval_rows,
        encode(tokenizer, train_rows, max_len),
        encode(tokenizer, eval_rows, max_len),
    )
