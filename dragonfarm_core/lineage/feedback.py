"""Chat feedback in the lineage: the events given on each run, and the files `dragon.feedback()`
wrote from them.

    add_feedback(graph, runs_dir)

The events (feedback/events.jsonl, `feedback_store`) name the run they were given on; they are
one node per run (or per model, for a chat with no run). An export (`sft-<label>.jsonl`,
`pairs-<label>.jsonl`) records no event ids, but feedback() builds it from every event there
was, each row from the conversation's last user turn and a reply: an event went into an export
when it was written before the file and its (last user turn, reply or edit) is a row's.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from dragonfarm_core.conversation import feedback_store
from dragonfarm_core.lineage.graph import PRESENT, Graph, Node
from dragonfarm_core.lineage.runs import file_key, mtime, named_run, real
from dragonfarm_core.rundir import files

EXPORT_PREFIXES = ("sft-", "pairs-")


def _last_user(messages: list[dict[str, Any]]) -> str:
    users = [m.get("content") for m in messages if m.get("role") == "user"]
    return str(users[-1]) if users else ""


def _event_row(event: dict[str, Any]) -> tuple[str, str]:
    """(last user turn, the reply it counts as): an edit counts as its edited text."""
    text = event.get("edited") if event.get("kind") == "edit" else event.get("reply")
    return _last_user(event.get("messages") or []), str(text or "")


def _export_rows(path: Path) -> set[tuple[str, str]]:
    """Every (last user turn, reply) an export file holds."""
    rows: set[tuple[str, str]] = set()
    for row in files.read_jsonl(path, tolerant=True):
        if isinstance(row.get("messages"), list) and row["messages"]:  # sft: conversations
            *before, last = row["messages"]
            rows.add((_last_user(before), str(last.get("content") or "")))
        elif isinstance(row.get("prompt"), str):  # pairs: flat columns
            rows |= {(row["prompt"], str(row.get(c) or "")) for c in ("chosen", "rejected")}
    return rows


def _given_on(graph: Graph, event: dict[str, Any], runs_dir: Path) -> tuple[str, str]:
    """(key, label) of what an event was given on: its run, else its model."""
    if isinstance(event.get("run"), str) and event["run"]:
        key = named_run(graph, event["run"], runs_dir)
        return key, graph.nodes[key].id
    return f"model:{event.get('model')}", str(event.get("model") or "a model")


def _summary(events: list[dict[str, Any]]) -> str:
    counts = Counter("edit" if e.get("kind") == "edit" else e.get("verdict") for e in events)
    shown = ", ".join(f"{counts[k]} {k}" for k in ("up", "down", "edit") if counts[k])
    return f"{len(events)} events: {shown}"


def add_feedback(graph: Graph, runs_dir: Path) -> None:
    folder = runs_dir / files.FEEDBACK_DIR
    if not folder.is_dir():
        return
    events = feedback_store.read_events(runs_dir)
    events_file = folder / feedback_store.EVENTS_FILE
    groups: dict[str, list[dict[str, Any]]] = {}
    on: dict[str, tuple[str, str]] = {}
    for event in events:
        given, label = _given_on(graph, event, runs_dir)
        groups.setdefault(given, []).append(event)
        on[given] = (given, label)
    node_of: dict[str, str] = {}
    for given, group in groups.items():
        key = graph.add(Node(f"feedback:{given}", "feedback", f"feedback on {on[given][1]}",
                             str(events_file), max(str(e.get("time")) for e in group), PRESENT,
                             _summary(group)))  # fmt: skip
        if given in graph.nodes:  # a run (a model with no run has no node)
            graph.link(given, key, "chatted with")
        node_of[given] = key
    for path in sorted(folder.glob("*.jsonl")):
        if not path.name.startswith(EXPORT_PREFIXES):
            continue
        written, rows = mtime(path) or "", _export_rows(path)
        key = graph.add(Node(file_key("feedback_export", real(path)), "feedback_export",
                             path.name, str(real(path)), written, PRESENT,
                             f"{len(files.read_jsonl(path, tolerant=True))} rows"))  # fmt: skip
        used: Counter[str] = Counter()
        for given, group in groups.items():
            for e in group:
                if str(e.get("time")) <= written and _event_row(e) in rows:
                    used[given] += 1
        for given, n in used.items():
            graph.link(node_of[given], key, f"{n} of its events")
