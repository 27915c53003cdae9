"""Chat feedback: ratings and edits saved as events, and turned into the next training data.

    fb = dragon.feedback()
    fb.records                                  # every event, one row each
    better = dragon.train(fb.sft, run)          # liked and edited replies
    dpo = dragon.prefer(fb.pairs, better)       # liked/edited vs disliked, same prompt

Events live in `<runs_dir>/feedback/events.jsonl`, one JSON object per line, each appended with
a single write so concurrent chats never interleave. An event holds the turns that led to the
reply, the reply, the verdict ("up"/"down") or the edited text, the run and model, a time and
an id. For each (conversation so far, reply) the latest verdict counts; an edit counts as a
liked reply whose text is the edit.

`feedback()` writes `sft-<label>.jsonl` (conversations: the turns before the reply plus the
liked or edited reply) and `pairs-<label>.jsonl` (flat columns prompt, chosen, rejected,
system) next to the events, and loads them back through the public data API, so a run trained
on them names a file that `code(run)` can point at. Pairs keep the conversation's system
prompt and its last user turn as the prompt; earlier turns of a multi-turn chat are left out
of the pair (they stay in the sft file).
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from dragonfarm_core.inference.protocol import Message
from dragonfarm_core.rundir import files

EVENTS_FILE = "events.jsonl"
VERDICTS = ("up", "down")
RECORD_COLUMNS = [
    "id",
    "time",
    "kind",
    "verdict",
    "run",
    "model",
    "backend",
    "base",
    "prompt",
    "reply",
    "edited",
    "messages",
]


def feedback_dir(runs_dir: str | os.PathLike[str] | None = None) -> Path:
    from dragonfarm_core.rundir.location import runs_dir as resolve_runs_dir

    return Path(resolve_runs_dir(runs_dir)) / files.FEEDBACK_DIR


def record_event(
    runs_dir: str | os.PathLike[str] | None,
    *,
    kind: str,
    messages: list[Message],
    reply: str,
    verdict: str | None = None,
    edited: str | None = None,
    run: str | None = None,
    model: str | None = None,
    backend: str | None = None,
    base: bool = False,
) -> dict[str, Any]:
    """Append one rating or edit event; returns it."""
    if kind == "rating" and verdict not in VERDICTS:
        raise ValueError(f"verdict = {verdict!r}; rate a reply 'up' or 'down'.")
    if kind == "edit" and (not isinstance(edited, str) or not edited.strip()):
        raise ValueError("The edited reply is empty; write the reply you wanted.")
    if kind not in ("rating", "edit"):
        raise ValueError(f"kind = {kind!r}; feedback events are 'rating' or 'edit'.")
    event = {
        "id": uuid.uuid4().hex,
        "time": files.now_iso(),
        "kind": kind,
        "verdict": verdict,
        "run": run,
        "model": model,
        "backend": backend,
        "base": base,
        "messages": messages,
        "reply": reply,
        "edited": edited,
    }
    folder = feedback_dir(runs_dir)
    folder.mkdir(parents=True, exist_ok=True)
    files.append_jsonl(folder / EVENTS_FILE, event)
    return event


def read_events(runs_dir: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    return files.read_jsonl(feedback_dir(runs_dir) / EVENTS_FILE)


@dataclass
class Feedback:
    """Every feedback event, and the training data made from them (None when there is none)."""

    records: pd.DataFrame
    sft: Any
    pairs: Any
    sft_path: Path | None = None
    pairs_path: Path | None = None

    def __repr__(self) -> str:
        def size(path: Path | None) -> str:
            return f"{len(files.read_jsonl(path))} rows ({path.name})" if path else "None"

        return (
            f"Feedback: {len(self.records)} events; sft: {size(self.sft_path)}; "
            f"pairs: {size(self.pairs_path)}"
        )


def _records(events: list[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for e in events:
        users = [m["content"] for m in e.get("messages") or [] if m.get("role") == "user"]
        rows.append(
            {**{c: e.get(c) for c in RECORD_COLUMNS}, "prompt": users[-1] if users else None}
        )
    return pd.DataFrame(rows, columns=RECORD_COLUMNS)


def judgments(events: list[dict[str, Any]]) -> dict[str, dict[str, bool]]:
    """For each conversation so far (as JSON): reply text -> liked? The latest event wins."""
    out: dict[str, dict[str, bool]] = {}
    for e in events:
        context = json.dumps(e.get("messages") or [], ensure_ascii=False)
        if e.get("kind") == "edit" and e.get("edited"):
            out.setdefault(context, {})[e["edited"]] = True
        elif e.get("kind") == "rating" and e.get("verdict") in VERDICTS:
            out.setdefault(context, {})[e.get("reply") or ""] = e["verdict"] == "up"
    return out


def _usable(messages: list[Message]) -> bool:
    return bool(messages) and all(m.get("content", "").strip() for m in messages)


def sft_rows(judged: dict[str, dict[str, bool]]) -> list[dict[str, Any]]:
    rows = []
    for context, replies in judged.items():
        for text, liked in replies.items():
            messages = [*json.loads(context), {"role": "assistant", "content": text}]
            if liked and _usable(messages):
                rows.append({"messages": messages})
    return rows


def pair_rows(judged: dict[str, dict[str, bool]]) -> list[dict[str, Any]]:
    rows = []
    for context, replies in judged.items():
        messages = json.loads(context)
        users = [m["content"] for m in messages if m["role"] == "user"]
        system = messages[0]["content"] if messages and messages[0]["role"] == "system" else None
        liked = [t for t, ok in replies.items() if ok and t.strip()]
        disliked = [t for t, ok in replies.items() if not ok and t.strip()]
        if not users or not users[-1].strip():
            continue
        rows += [
            {"prompt": users[-1], "chosen": c, "rejected": r, "system": system or None}
            for c in liked
            for r in disliked
        ]
    return rows


def _tag(label: str | None) -> str:
    if label is None:
        return files.now_iso().replace("-", "").replace(":", "").replace("T", "-")[:15]
    tag = re.sub(r"[^A-Za-z0-9._-]+", "-", str(label)).strip("-.")
    if not tag:
        raise ValueError(f"label = {label!r}: use letters, digits, '-', '_' or '.'.")
    return tag


def feedback(runs_dir: str | os.PathLike[str] | None = None, label: str | None = None) -> Feedback:
    """Every rating and edit, plus an sft and a pairs dataset built from them.

    The datasets are written as `feedback/sft-<label>.jsonl` and `feedback/pairs-<label>.jsonl`
    (label defaults to the time) and read back with `conversations()` and
    `dataset(...).map_pairs(...)`; either is None when no event supports it.
    """
    from dragonfarm_core.data import conversations, dataset

    folder = feedback_dir(runs_dir)
    events = read_events(runs_dir)
    judged = judgments(events)
    tag = _tag(label)
    result = Feedback(records=_records(events), sft=None, pairs=None)
    if rows := sft_rows(judged):
        result.sft_path = folder / f"sft-{tag}.jsonl"
        files.write_jsonl(result.sft_path, rows)
        result.sft = conversations(str(result.sft_path))
    if rows := pair_rows(judged):
        result.pairs_path = folder / f"pairs-{tag}.jsonl"
        files.write_jsonl(result.pairs_path, rows)
        system = "system" if any(r["system"] for r in rows) else None
        result.pairs = dataset(str(result.pairs_path)).map_pairs(
            prompt="prompt", chosen="chosen", rejected="rejected", system=system
        )
    return result
