"""`chat`: a conversation with a run or model that remembers its turns and collects feedback.

    c = dragon.chat(run, system="You are a concise support agent.")
    c.say("My thermostat keeps dropping off Wi-Fi.")
    c.say("I tried that. What else?")      # the model sees the first exchange
    c.rate("up"); c.save("good-conversation.json")

Every turn sends the whole history (the system prompt, then the turns) through the backend.
With `context_window` set, the oldest exchanges are left out of what is sent until the prompt
and `max_new_tokens` fit; the system prompt and the latest user turn are always sent. History
and transcripts use the training message format, so a good conversation is one training row
(`as_example()`); `rate` and `edit` save feedback events that `dragon.feedback()` turns into data.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dragonfarm_core.conversation.feedback_store import record_event
from dragonfarm_core.conversation.generation import target_for
from dragonfarm_core.inference.default import backend as default_backend
from dragonfarm_core.inference.protocol import Backend, Message, OnToken, Sampling
from dragonfarm_core.inference.target import Target
from dragonfarm_core.inference.tokens import count_tokens
from dragonfarm_core.rundir import files


@dataclass(frozen=True)
class ContextUsage:
    """How full the context window is."""

    tokens: int
    """Estimated prompt tokens the next turn sends (before the new user message)."""
    window: int
    """The context window in tokens, reply included."""
    dropped_turns: int
    """Oldest turns (user and assistant messages) left out to stay under the window."""


class Chat:
    """A conversation; build one with `dragon.chat(...)` or `dragon.chat_load(path)`."""

    def __init__(
        self,
        target: Target,
        backend: Backend,
        system: str | None,
        sampling: Sampling,
        runs_dir: str | os.PathLike[str] | None = None,
        context_window: int | None = None,
        base: bool = False,
    ) -> None:
        self.target, self.backend, self.sampling = target, backend, sampling
        self.system = system or None
        self.runs_dir, self.context_window, self.base = runs_dir, context_window, base
        self._turns: list[Message] = []

    def __repr__(self) -> str:
        return f"<Chat with {self.model_name!r} through {self.backend!r}: {len(self._turns)} turns>"

    @property
    def model_name(self) -> str:
        return self.backend.model or self.target.name

    # --- talking ---

    def say(self, text: str, on_token: OnToken | None = None) -> str:
        """Send a user turn and return the reply, streaming pieces to `on_token`."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("say() needs a non-empty message.")
        self._turns.append({"role": "user", "content": text})
        try:
            reply = self._ask(on_token)
        except BaseException:
            self._turns.pop()  # a failed turn leaves the history as it was
            raise
        self._turns.append({"role": "assistant", "content": reply})
        return reply

    def regenerate(self, on_token: OnToken | None = None) -> str:
        """Ask again for the last reply, replacing it."""
        last = self._last_reply("regenerate")
        self._turns.pop()
        try:
            reply = self._ask(on_token)
        except BaseException:
            self._turns.append(last)
            raise
        self._turns.append({"role": "assistant", "content": reply})
        return reply

    def _ask(self, on_token: OnToken | None) -> str:
        messages, _ = self._window()
        return self.backend.chat(self.target.spec, messages, self.sampling, on_token)

    def _window(self) -> tuple[list[Message], int]:
        """What is sent: the system prompt and the newest turns that fit; and how many were cut."""
        system = [{"role": "system", "content": self.system}] if self.system else []
        turns = self._turns
        users = [i for i, m in enumerate(turns) if m["role"] == "user"]
        if self.context_window is None or not users:
            return system + turns, 0
        budget = self.context_window - self.sampling.max_new_tokens
        start = 0
        while start < users[-1] and count_tokens(system + turns[start:], self.target.spec) > budget:
            start += 1  # drop a whole exchange: up to the next user turn
            while start < users[-1] and turns[start]["role"] != "user":
                start += 1
        return system + turns[start:], start

    # --- the history ---

    def history(self) -> list[Message]:
        """The messages so far, system prompt first (copies)."""
        system = [{"role": "system", "content": self.system}] if self.system else []
        return [dict(m) for m in system + self._turns]

    def reset(self) -> None:
        """Forget every turn (the system prompt stays)."""
        self._turns.clear()

    def undo(self) -> list[Message]:
        """Drop the last exchange (the last user turn and the reply to it); returns them."""
        users = [i for i, m in enumerate(self._turns) if m["role"] == "user"]
        if not users:
            raise ValueError("Nothing to undo: the conversation has no turns.")
        dropped, self._turns = self._turns[users[-1] :], self._turns[: users[-1]]
        return dropped

    def context_usage(self) -> ContextUsage | None:
        """Estimated tokens, the window and turns dropped; None without a context_window."""
        if self.context_window is None:
            return None
        messages, dropped = self._window()
        tokens = count_tokens(messages, self.target.spec) if messages else 0
        return ContextUsage(tokens=tokens, window=self.context_window, dropped_turns=dropped)

    def _last_reply(self, action: str) -> Message:
        if not self._turns or self._turns[-1]["role"] != "assistant":
            raise ValueError(f"Nothing to {action}: there is no reply yet; say() something first.")
        return self._turns[-1]

    # --- feedback ---

    def rate(self, verdict: str) -> dict[str, Any]:
        """Record "up" or "down" for the last reply; returns the saved event."""
        reply = self._last_reply("rate")
        return self._record(kind="rating", reply=reply["content"], verdict=verdict)

    def edit(self, text: str) -> dict[str, Any]:
        """Replace the last reply with a better one, saved as feedback; returns the event."""
        reply = self._last_reply("edit")
        event = self._record(kind="edit", reply=reply["content"], edited=text)
        self._turns[-1] = {"role": "assistant", "content": text}
        return event

    def _record(self, **what: Any) -> dict[str, Any]:
        return record_event(
            self.runs_dir,
            messages=self.history()[:-1],
            run=self.target.run_dir,
            model=self.model_name,
            backend=self.backend.name,
            base=self.base,
            **what,
        )

    # --- transcripts ---

    def as_example(self) -> dict[str, Any]:
        """The conversation as one training row: {"messages": [...]}."""
        self._last_reply("turn into an example")
        return {"messages": self.history()}

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the transcript (training format plus what it was with) as JSON."""
        path = Path(path).expanduser()
        files.write_json(
            path,
            {
                "messages": self.history(),
                "model": self.model_name,
                "source": self.target.source,
                "run": self.target.run_dir,
                "base": self.base,
                "backend": self.backend.name,
                "settings": {**self.sampling.as_dict(), "context_window": self.context_window},
                "saved_at": files.now_iso(),
            },
        )
        return path


def chat(
    x: Any = None,
    system: str | None = None,
    backend: Backend | None = None,
    max_new_tokens: int = 256,
    temperature: float = 0.7,
    top_p: float = 0.9,
    base: bool = False,
    runs_dir: str | os.PathLike[str] | None = None,
    context_window: int | None = None,
) -> Chat:
    """A conversation with a run or model (or the backend's own model when x is None)."""
    backend = backend or default_backend()
    sampling = Sampling(max_new_tokens, temperature, top_p)
    if system is not None and not isinstance(system, str):
        raise TypeError("system must be a str or None.")
    if context_window is not None and (
        not isinstance(context_window, int) or context_window <= max_new_tokens
    ):
        raise ValueError(
            f"context_window = {context_window!r}: it must be a whole number of "
            f"tokens above max_new_tokens ({max_new_tokens}), which it must hold."
        )
    return Chat(
        target_for(x, base, backend),
        backend,
        system,
        sampling,
        runs_dir=runs_dir,
        context_window=context_window,
        base=base,
    )


def _read_transcript(path: Path) -> tuple[list[Message], dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"Cannot read the transcript {path}: {e}") from None
    meta = data if isinstance(data, dict) else {}
    messages = meta.get("messages") if isinstance(data, dict) else data
    if not isinstance(messages, list):
        raise ValueError(f'{path} is not a transcript: expected {{"messages": [...]}}.')
    for i, m in enumerate(messages):
        if not (
            isinstance(m, dict)
            and m.get("role") in ("system", "user", "assistant")
            and isinstance(m.get("content"), str)
        ) or (m["role"] == "system" and i > 0):
            raise ValueError(
                f"{path}, message {i}: expected {{'role': 'user'|'assistant'"
                f"|'system' (first only), 'content': text}}, got {m!r}."
            )
    return [{"role": m["role"], "content": m["content"]} for m in messages], meta


def chat_load(path: str | os.PathLike[str], x: Any = None, backend: Backend | None = None) -> Chat:
    """Continue a saved transcript; x defaults to the run or model it was saved with."""
    path = Path(path).expanduser()
    messages, meta = _read_transcript(path)
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else None
    settings = meta.get("settings") or {}
    options = {
        k: settings[k]
        for k in ("max_new_tokens", "temperature", "top_p", "context_window")
        if settings.get(k) is not None
    }
    source = x if x is not None else meta.get("source")
    try:
        c = chat(source, system=system, backend=backend, base=bool(meta.get("base")), **options)
    except (ValueError, OSError) as e:
        if x is not None:
            raise
        raise ValueError(
            f"{path} was saved with {source!r}, which cannot be loaded now ({e}). "
            "Pass x= to continue it with another run or model."
        ) from None
    c._turns = messages[1:] if system else messages
    return c
