"""The text of each usable row, cut the ways `report.py` measures it.

Exact duplicates compare whole records. Near duplicates compare what the model is asked: the
prompt, or for a conversation every turn before the reply, without the system prompt (usually
the same everywhere). Replies are left out on purpose: a house style makes good replies alike,
while two nearly identical questions are what inflates or contradicts a dataset. Lengths
measure what the trainer tokenizes: the whole conversation, and for a preference pair the prompt
with the longer of its two replies.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dragonfarm_core.data.dataset import Dataset


@dataclass
class ReportTexts:
    keys: list[bytes] = field(default_factory=list)  # per usable row: its whole record's digest
    similar: list[str] = field(default_factory=list)  # per usable row: its prompt side
    lengths: list[list[str]] = field(default_factory=list)  # per usable row: texts to measure
    rows: list[int] = field(default_factory=list)  # per usable row: its 0-based frame row
    empty: dict[str, int] = field(default_factory=dict)
    identical: int = 0
    notes: list[str] = field(default_factory=list)


def _content(messages: list[dict[str, str]], system: bool = True) -> str:
    return "\n\n".join(m["content"] for m in messages if system or m["role"] != "system")


def _measure(rec: dict[str, Any]) -> tuple[str, list[str]]:
    """(text compared for near duplicates, texts whose length counts) of one record."""
    if "messages" in rec:
        return _content(rec["messages"][:-1], system=False), [_content(rec["messages"])]
    prompt = _content(rec["prompt"])
    question = _content(rec["prompt"], system=False)
    if "chosen" in rec:
        chosen, rejected = rec["chosen"][0]["content"], rec["rejected"][0]["content"]
        return question, [f"{prompt}\n\n{chosen}", f"{prompt}\n\n{rejected}"]
    return question, [prompt]


def report_texts(ds: Dataset) -> ReportTexts:
    """Texts of a mapped dataset's records, or of an unmapped dataset's raw rows."""
    out = ReportTexts()
    if ds.mapping is None:
        out.notes.append("Not mapped yet: rows are measured as all their cells together.")
        frame = ds.frame
        out.empty = {c: int(frame[c].map(_blank).sum()) for c in ds.columns}
        for i, row in enumerate(frame.itertuples(index=False, name=None)):
            text = "\n".join(c for c in row if c is not None)
            out.keys.append(_digest(json.dumps(row)))
            out.similar.append(text)
            out.lengths.append([text])
            out.rows.append(i)
        return out
    rendered = ds.rendered()
    out.empty = {name: len(rows) for name, rows in rendered.empty.items()}
    out.identical = len(rendered.identical)
    for rec, row in zip(rendered.records, rendered.rows, strict=True):
        similar, lengths = _measure(rec)
        # Other columns (ids, say) travel in "fields" but do not make a prompt new.
        key = {k: v for k, v in rec.items() if k != "fields"}
        out.keys.append(_digest(json.dumps(key, sort_keys=True)))
        out.similar.append(similar)
        out.lengths.append(lengths)
        out.rows.append(row)
    return out


def _digest(text: str) -> bytes:
    """16 bytes that tell records apart (exact duplicates are counted on them), not a second
    copy of every row's text."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _blank(cell: str | None) -> bool:
    return cell is None or not cell.strip()
