"""The person's verdicts in the feedback store, as questions a judge can be asked.

    cases, damaged = feedback_cases(runs_dir, run=None)
    cases[0].mode, cases[0].human    # "pairwise", "A"  /  "rubric", "liked"

Where the person chose between two replies to the same conversation, that is a pairwise case:
an edit (the edited reply over the original) or a liked and a disliked reply to the same
conversation. Every other rated reply is a rubric case: liked or disliked on its own. For each
(conversation, reply) the latest verdict counts, as in `feedback()`.

A pair's two replies are put in a fixed order that does not depend on which one the person
preferred (by a hash of their texts), so the person's choice is "A" about as often as "B" and
kappa can measure agreement beyond chance; the judge still sees both orders (`compare_replies`).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

from dragonfarm_core.conversation.feedback_store import judgments, read_events_checked


@dataclass(frozen=True)
class Case:
    """One verdict of the person's: the question, the reply or replies, and what they chose."""

    id: str
    mode: str
    """"pairwise" or "rubric"."""
    source: str
    """"edit" (edited over the original), "rating" (liked vs disliked, or one rated reply)."""
    prompt: str
    system: str | None
    reply_a: str
    reply_b: str | None
    human: str
    """Pairwise: "A" or "B", the reply the person preferred; rubric: "liked" or "disliked"."""
    run: str | None = None


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def _pair(context: str, prompt: str, system: str | None, better: str, worse: str,
          source: str, run: str | None) -> Case:  # fmt: skip
    a, b = sorted((better, worse), key=lambda text: _digest(text))
    return Case(_digest("pair", context, a, b)[:16], "pairwise", source, prompt, system, a, b,
                "A" if a == better else "B", run)  # fmt: skip


def _turns(context: str) -> tuple[str, str | None] | None:
    """(the last user turn, the system prompt) of a conversation, or None without a user turn."""
    messages = json.loads(context)
    users = [m["content"] for m in messages if m.get("role") == "user"]
    if not users or not users[-1].strip():
        return None
    system = messages[0]["content"] if messages and messages[0].get("role") == "system" else None
    return users[-1], system or None


def feedback_cases(
    runs_dir: str | os.PathLike[str] | None = None, run: str | None = None
) -> tuple[list[Case], list[str]]:
    """(the cases, the damaged lines of the events file that were skipped); only the events of
    `run` (a run id) when given. Pairs first, then single replies, each in the order the
    conversations were first rated."""
    events, damaged = read_events_checked(runs_dir)
    if run is not None:
        events = [e for e in events if e.get("run") == run]
    judged = judgments(events)
    runs: dict[str, Any] = {}
    edits: dict[str, list[tuple[str, str]]] = {}
    for e in events:
        context = json.dumps(e.get("messages") or [], ensure_ascii=False)
        runs.setdefault(context, e.get("run"))
        original = (e.get("reply") or "").strip()
        if e.get("kind") == "edit" and e.get("edited") and original:
            edits.setdefault(context, []).append((e["edited"], e.get("reply") or ""))
    pairs: list[Case] = []
    singles: list[Case] = []
    for context, replies in judged.items():
        turns = _turns(context)
        if turns is None:
            continue
        prompt, system = turns
        found: dict[tuple[str, str], str] = {}
        for better, worse in edits.get(context, []):
            # An original the person later liked is no longer the worse of the two.
            if better.strip() != worse.strip() and not replies.get(worse, False):
                found.setdefault((better, worse), "edit")
        liked = [t for t, ok in replies.items() if ok and t.strip()]
        disliked = [t for t, ok in replies.items() if not ok and t.strip()]
        for better in liked:
            for worse in disliked:
                found.setdefault((better, worse), "rating")
        in_pairs = {t for pair in found for t in pair}
        for (better, worse), source in found.items():
            pairs.append(_pair(context, prompt, system, better, worse, source, runs[context]))
        for text, ok in replies.items():
            if text.strip() and text not in in_pairs:
                singles.append(Case(_digest("one", context, text)[:16], "rubric", "rating",
                                    prompt, system, text, None, "liked" if ok else "disliked",
                                    runs[context]))  # fmt: skip
    return pairs + singles, damaged
