"""The shape every inference backend has, and the values that travel through it.

A backend turns conversations (lists of `{"role", "content"}` messages, the training format)
into replies. The local worker needs to know which weights to load (`ModelSpec`); a server or
Ollama backend names its own model and ignores it. `Sampling` holds the generation settings,
checked once here so every backend gets valid values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from dragonfarm_core.chat_template import ROLES

Message = dict[str, str]
OnToken = Callable[[str], None]
MAX_SEED = 2**32 - 1


class InferenceError(RuntimeError):
    """A backend could not produce a reply; the message says why and what to do."""


class InferenceTimeout(InferenceError):
    """A backend did not answer in time."""


class Cancelled(Exception):
    """Raised by an `on_token` whose caller went away: the backend stops the reply."""


@dataclass(frozen=True)
class Sampling:
    """How to generate: length, randomness, nucleus sampling and the random seed."""

    max_new_tokens: int = 256
    """Most tokens in a reply."""
    temperature: float = 0.7
    """0 is greedy decoding (the same reply every time); higher is more varied."""
    top_p: float = 0.9
    """Nucleus sampling: sample among the most likely tokens that cover this probability."""
    seed: int | None = None
    """The same conversations with the same seed give the same replies (on the same backend,
    hardware and weights); None samples afresh each call. Greedy decoding needs none."""
    stop: tuple[str, ...] = ()
    """Texts that end a reply where they first appear; the reply stops before them."""
    logit_bias: tuple[tuple[int, float], ...] = ()
    """(token id, bias) pairs: the bias (-100 to 100) is added to that token's logit before
    sampling, as OpenAI's logit_bias does (-100 all but bans it)."""

    def __post_init__(self) -> None:
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int):
            raise ValueError(f"max_new_tokens must be a whole number, got {self.max_new_tokens!r}.")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens = {self.max_new_tokens}; use 1 or more.")
        if not 0 <= self.temperature <= 5:
            raise ValueError(f"temperature = {self.temperature}; use 0 (greedy) up to 5.")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p = {self.top_p}; use a value above 0 and at most 1.")
        if self.seed is not None and (
            isinstance(self.seed, bool)
            or not isinstance(self.seed, int)
            or not 0 <= self.seed <= MAX_SEED
        ):
            # Every backend takes an unsigned 32-bit seed (llama.cpp's is one); torch takes more.
            raise ValueError(
                f"seed must be a whole number from 0 to {MAX_SEED}, or None; got {self.seed!r}."
            )
        if not isinstance(self.stop, tuple) or not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError(f"stop must be a tuple of non-empty strings, got {self.stop!r}.")
        for token, bias in self.logit_bias:
            if isinstance(token, bool) or not isinstance(token, int) or token < 0:
                raise ValueError(f"logit_bias names token {token!r}; use a token id (0 or more).")
            if not -100 <= bias <= 100:
                raise ValueError(f"logit_bias for token {token} is {bias}; use -100 to 100.")

    def nth(self, i: int) -> Sampling:
        """The settings for the i-th of several conversations sent one at a time (a server,
        Ollama): each gets its own seed (seed + i), so a prompt asked n times for n samples
        does not get the same reply n times, and the whole list still repeats."""
        if self.seed is None:
            return self
        return replace(self, seed=(self.seed + i) % (MAX_SEED + 1))

    def as_dict(self) -> dict[str, Any]:
        return {
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            # Only when set, so that saved transcripts' settings stay as they were.
            **({"stop": list(self.stop)} if self.stop else {}),
            **({"logit_bias": [list(b) for b in self.logit_bias]} if self.logit_bias else {}),
        }


@dataclass(frozen=True)
class Completion:
    """One reply with what an OpenAI client reads beside its text (`dragonfarm serve`)."""

    text: str
    finish_reason: str
    """"stop" (the model ended it, or a stop text did) or "length" (max_new_tokens cut it)."""
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class ModelSpec:
    """Weights the local worker loads: a base folder, adapters folded into it, a live adapter.

    `adapters` (earlier runs' adapters) are merged into the base in order, as the trainer did;
    `adapter` (the run's own) stays a separate LoRA layer, so `use_adapter=False` answers as
    the base model from the same loaded weights, without a reload.
    """

    base: str
    adapters: tuple[str, ...] = ()
    adapter: str | None = None
    use_adapter: bool = True
    trust_remote_code: bool = False

    @property
    def key(self) -> tuple[str, tuple[str, ...], str | None]:
        """What identifies the loaded weights (with or without the live adapter)."""
        return (self.base, self.adapters, self.adapter)

    def as_dict(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "adapters": list(self.adapters),
            "adapter": self.adapter,
            "use_adapter": self.use_adapter,
            "trust_remote_code": self.trust_remote_code,
        }


@runtime_checkable
class Backend(Protocol):
    """Anything that answers conversations: the local worker, an OpenAI server, Ollama."""

    # Read-only in the protocol (properties), so a backend whose model is always a `str`
    # (server, Ollama) or always None (local) fits: a settable `str | None` would not.
    @property
    def name(self) -> str:
        """The kind of backend, "local", "server" or "ollama": recorded with feedback."""
        ...

    @property
    def model(self) -> str | None:
        """The model this backend always answers with (server, Ollama), or None when each
        call names the weights to load (local)."""
        ...

    def chat(
        self,
        model: ModelSpec | None,
        messages: list[Message],
        sampling: Sampling,
        on_token: OnToken | None = None,
    ) -> str:
        """One reply to one conversation, streaming pieces to `on_token` as they come."""
        ...

    def generate(
        self, model: ModelSpec | None, conversations: list[list[Message]], sampling: Sampling
    ) -> list[str]:
        """One reply per conversation, in order (batched where the backend can)."""
        ...


def check_messages(messages: object, where: str = "messages") -> list[Message]:
    """Plain {"role", "content"} dicts with known roles, ending with a user turn.

    Takes anything (a request body, a caller's list) and checks it, hence `object`.
    """
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"{where} must be a non-empty list of {{'role', 'content'}} messages.")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise ValueError(
                f"{where}[{i}] must be a dict whose role is one of {', '.join(ROLES)}; got {m!r}."
            )
        if not isinstance(m.get("content"), str):
            raise ValueError(f"{where}[{i}] ({m['role']}) has no text content.")
        out.append({"role": m["role"], "content": m["content"]})
    if out[-1]["role"] != "user":
        raise ValueError(f"{where} must end with a user turn, not {out[-1]['role']!r}.")
    return out


def cut_at_stop(text: str, stop: Iterable[str]) -> tuple[str, bool]:
    """(`text` up to the first of the `stop` texts in it, whether one was there).

    >>> cut_at_stop("1, 2, 3", [", 3", "2"])
    ('1, ', True)
    """
    found = [i for i in (text.find(s) for s in stop) if i >= 0]
    return (text[: min(found)], True) if found else (text, False)


def stream_reply(pieces: Iterable[str | None], on_token: OnToken) -> str:
    """Pass each non-empty streamed piece to `on_token`; the whole reply, stripped."""
    kept = []
    for piece in pieces:
        if piece:
            kept.append(piece)
            on_token(piece)
    return "".join(kept).strip()
