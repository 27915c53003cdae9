"""Chat feedback: ratings and edits saved as events, and turned into the next training data.

    fb = dragon.feedback()
    fb.records                                  # every event, one row each
    better = dragon.train(fb.sft, run)          # liked and edited replies
    dpo = dragon.prefer(fb.pairs, better)       # liked/edited vs disliked, same prompt

Events live in `<runs_dir>/feedback/events.jsonl`, one JSON object per line, each appended with
a single write so concurrent chats never interleave, and on a fresh line: a write that failed
midway (a full disk) leaves a torn line that readers skip and report (`Feedback.damaged`, a
warning), never one that swallows the next event. An event holds the turns that led to the
reply, the reply, the verdict ("up"/"down") or the edited text, the run and model, a time and
an id. For each (conversation so far, reply) the latest verdict counts; an edit counts as a
liked reply whose text is the edit.

`feedback()` writes `sft-<label>.jsonl` (conversations: the turns before the reply plus the
liked or edited reply) and `pairs-<label>.jsonl` (flat columns prompt, chosen, rejected,
system) next to the events (the label defaults to the time and a few random letters, so two
calls never overwrite each other's files), and loads them back through the public data API, so a run trained
on them names a file that `code(run)` can point at. Pairs keep the conversation's system
prompt and its last user turn as the prompt; earlier turns of a multi-turn chat are left out
of the pair (they stay in the sft file).
"""

from __future__ import annotations

import json
import os
import re
import uuid
import warnings
from dataclasses import dataclass, field
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
    """Every event that can be read (see `read_events_checked` for the lines that cannot)."""
    return read_events_checked(runs_dir)[0]


def read_events_checked(
    runs_dir: str | os.PathLike[str] | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """(every event that can be read, what is wrong with each line that cannot): a torn line
    from a failed write, or a damaged one, is skipped and said, never a reason to lose the rest.
    """
    rows, problems = files.read_jsonl_checked(feedback_dir(runs_dir) / EVENTS_FILE)
    events = []
    for row in rows:
        if problem := _event_problem(row):
            name = row.get("id")
            name = f"event {name[:32]}" if isinstance(name, str) else "an event without an id"
            problems.append(f"{name}: {problem}")
        else:
            events.append(row)
    return events, problems


def _event_problem(event: dict[str, Any]) -> str | None:
    """What makes a line that parsed not an event record_event writes (a hand edit), or None."""
    messages = event.get("messages")
    if not isinstance(messages, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in messages
    ):
        return "its messages are not a list of {role, content} texts"
    for key in ("reply", "edited", "verdict", "kind", "run", "model"):
        if event.get(key) is not None and not isinstance(event[key], str):
            return f"its {key} is not text"
    return None


def damage_note(problems: list[str], runs_dir: str | os.PathLike[str] | None = None) -> str:
    """One sentence about the lines of the events file that were skipped ("" for none)."""
    if not problems:
        return ""
    shown = "; ".join(problems[:3]) + ("; ..." if len(problems) > 3 else "")
    return (
        f"{len(problems)} line(s) of {feedback_dir(runs_dir) / EVENTS_FILE} cannot be read and "
        f"are skipped ({shown}): a write cut short (a full disk?) or a hand edit. The other "
        "events are all here; remove those lines to silence this."
    )


@dataclass
class Feedback:
    """Every feedback event, and the training data made from them (None when there is none)."""

    records: pd.DataFrame
    sft: Any
    pairs: Any
    sft_path: Path | None = None
    pairs_path: Path | None = None
    # What is wrong with each line of the events file that was skipped (read_events_checked).
    damaged: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        def size(path: Path | None) -> str:
            return f"{len(files.read_jsonl(path))} rows ({path.name})" if path else "None"

        skipped = f"; {len(self.damaged)} damaged lines skipped" if self.damaged else ""
        return (
            f"Feedback: {len(self.records)} events{skipped}; sft: {size(self.sft_path)}; "
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
    """The label of the files one feedback() call writes: the time and random letters when none
    is given (two calls in the same second must not overwrite each other's files)."""
    if label is None:
        stamp = files.now_iso().replace("-", "").replace(":", "").replace("T", "-")[:15]
        return f"{stamp}-{uuid.uuid4().hex[:6]}"
    tag = re.sub(r"[^A-Za-z0-9._-]+", "-", str(label)).strip("-.")
    if not tag:
        raise ValueError(f"label = {label!r}: use letters, digits, '-', '_' or '.'.")
    return tag


def feedback(runs_dir: str | os.PathLike[str] | None = None, label: str | None = None) -> Feedback:
    """Every rating and edit, plus an sft and a pairs dataset built from them.

    The datasets are written as `feedback/sft-<label>.jsonl` and `feedback/pairs-<label>.jsonl`
    (label defaults to the time and a few random letters) and read back with `conversations()`
    and `dataset(...).map_pairs(...)`; either is None when no event supports it. Lines of the
    events file that cannot be read are skipped, listed in `.damaged` and warned about.
    """
    from dragonfarm_core.data import conversations, dataset

    folder = feedback_dir(runs_dir)
    events, damaged = read_events_checked(runs_dir)
    if damaged:
        warnings.warn(damage_note(damaged, runs_dir), stacklevel=2)
    judged = judgments(events)
    tag = _tag(label)
    result = Feedback(records=_records(events), sft=None, pairs=None, damaged=damaged)
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
