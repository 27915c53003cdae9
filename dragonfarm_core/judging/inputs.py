"""What a judgement judges: a run's prompts, and the replies to them.

    rows = data_rows(run, "eval", n=20, seed=42)   # [Row(prompt, reference, system), ...]
    dragon.prompts(run, "train", n=200)            # the user turns only
    replies = generate_replies(run, rows, None, 256, base=False, tick=print)

Prompts default to the run's held-out rows: the same `n` rows, chosen with `seed`, so runs
sharing a dataset are judged on the same questions. Replies are generated greedily through the
inference backend (`generate`), in batches, each row under its own system turn unless one is
given.
"""

from __future__ import annotations

import math
import os
import random
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dragonfarm_core.conversation.generation import generate
from dragonfarm_core.judging import judges as judging
from dragonfarm_core.rundir import files
from dragonfarm_core.rundir.run import Run, open_run


@dataclass(frozen=True)
class Row:
    """One prompt of a run's data: the last user turn, its reference reply, its system turn."""

    prompt: str
    reference: str | None = None
    system: str | None = None


def _row_of(record: Any) -> Row | None:
    """A record of data/<split>.jsonl (sft/conversations, pairs or prompts shape) as a Row."""
    if not isinstance(record, dict):
        return None
    messages = record.get("messages")
    if isinstance(messages, list):  # sft, conversations: the last user turn and what follows
        texts = [m for m in messages if isinstance(m, dict) and isinstance(m.get("content"), str)]
        users = [i for i, m in enumerate(texts) if m.get("role") == "user"]
        if not users:
            return None
        last = users[-1]
        after = [m["content"] for m in texts[last + 1 :] if m.get("role") == "assistant"]
        return Row(texts[last]["content"], after[0] if after else None, _system(texts))
    prompt = record.get("prompt")
    if isinstance(prompt, list):  # pairs, prompts
        texts = [m for m in prompt if isinstance(m, dict) and isinstance(m.get("content"), str)]
        turns = [str(m["content"]) for m in texts if m.get("role") == "user"]
        if not turns:
            return None
        reference = record.get("reference")
        chosen = record.get("chosen")
        if reference is None and isinstance(chosen, list) and chosen:
            # A pair run's preferred reply is the nearest thing it has to a reference.
            reference = chosen[-1].get("content") if isinstance(chosen[-1], dict) else None
        return Row(turns[-1], reference if isinstance(reference, str) else None, _system(texts))
    return None


def _system(messages: list[dict[str, Any]]) -> str | None:
    systems = [m["content"] for m in messages if m.get("role") == "system"]
    return systems[0] if systems else None


def data_rows(
    run: Run | str | os.PathLike[str],
    split: str = "eval",
    n: int | float | None = None,
    seed: int = 42,
) -> list[Row]:
    """The rows of a run's data/<split>.jsonl as Rows: all of them in file order, or `n`
    chosen with `seed` (kept in file order), the same ones for every run of the same data."""
    run = open_run(run)
    if split not in ("eval", "train"):
        raise ValueError(f"split must be 'eval' (the held-out rows) or 'train', got {split!r}.")
    rows = [r for r in map(_row_of, files.read_jsonl(files.data_path(run.dir, split))) if r]
    if n is None or (isinstance(n, float) and math.isinf(n)):
        return rows
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n = {n!r}; use a whole number, 1 or more (None for all rows).")
    if n >= len(rows):
        return rows
    picked = sorted(random.Random(seed).sample(range(len(rows)), n))
    return [rows[i] for i in picked]


def prompts(
    run: Run | str | os.PathLike[str],
    split: str = "eval",
    n: int | float | None = None,
    seed: int = 42,
) -> list[str]:
    """The user turns of a run's held-out ("eval") or training ("train") rows, for
    `synthesize_pairs` or `judge`: prompt/response, conversation, pair and prompt runs alike.
    n: how many (None, or math.inf, for all), chosen with `seed` and kept in file order."""
    return [r.prompt for r in data_rows(run, split, n, seed)]


def rows_to_judge(
    run: Run, given: Sequence[str] | None, n: int, seed: int
) -> tuple[list[Row], str]:
    """(the rows to judge, where they came from: "given", "eval" or "train"); the training
    rows, with a warning, only when the run held none out."""
    if given is not None:
        if isinstance(given, str) or not all(isinstance(p, str) for p in given):
            raise TypeError("prompts must be a list of str (or None for the run's held-out rows).")
        if not given:
            raise ValueError("prompts is empty; pass at least one, or None for the held-out rows.")
        return [Row(p) for p in given], "given"
    rows = data_rows(run, "eval", n, seed)
    if rows:
        return rows, "eval"
    rows = data_rows(run, "train", n, seed)
    if not rows:
        raise ValueError(f"Run {run.id} has no prompts in its data; pass prompts=[...].")
    warnings.warn(
        f"Run {run.id} held no rows out; judging {len(rows)} of its training rows, which it "
        "has seen. Split the data (ds.split()) for a fair judgement.",
        UserWarning,
        stacklevel=3,
    )
    return rows, "train"


def generate_replies(
    x: Any,
    rows: list[Row],
    system: str | None,
    max_new_tokens: int,
    base: bool,
    tick: Callable[[int], None],
) -> list[str]:
    """Greedy replies to the rows, in order, a batch at a time; each row under `system`, else
    its own system turn (the one it was trained with)."""
    out: list[str] = [""] * len(rows)
    groups: dict[str | None, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(system if system is not None else row.system, []).append(i)
    for group_system, indexes in groups.items():
        for start in range(0, len(indexes), judging.BATCH):
            chunk = indexes[start : start + judging.BATCH]
            replies = generate(
                x,
                [rows[i].prompt for i in chunk],
                system=group_system,
                max_new_tokens=max_new_tokens,
                temperature=0.0,
                base=base,
            )
            for i, reply in zip(chunk, replies, strict=True):
                out[i] = reply
            tick(len(chunk))
    return out


def opponent_of(x: Run, against: Any) -> tuple[Any, bool, str]:
    """(what generates the other replies, base?, how it is named)."""
    if isinstance(against, str) and against.strip().lower() == "base":
        return x, True, "base"
    if isinstance(against, Run):
        return against, False, against.id
    if isinstance(against, str | os.PathLike):
        if not str(against).strip():
            raise ValueError("against = '': use 'base', a run, a model id or a model folder.")
        other = judging.local_model(str(against))
        if not isinstance(other, Run) and files.is_run_dir(other):
            other = Run(other)
        return other, False, other.id if isinstance(other, Run) else str(against)
    raise TypeError(
        f"against must be None (rubric mode), 'base', a run, a model id or a model folder; "
        f"got {type(against).__name__}."
    )
