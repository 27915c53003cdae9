"""Estimate how many tokens a conversation takes, without loading the model.

With a local model folder the estimate is exact for the prompt: the model's own tokenizer
(`tokenizers`, Rust, no torch) over the text its chat template renders. For a server or Ollama
model, whose tokenizer is not here, it is the usual rule of thumb of four characters a token
plus a few tokens of framing per message.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from dragonfarm_core.chat_template import ChatTemplateError, load_chat_template, render
from dragonfarm_core.inference.protocol import Message, ModelSpec

CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4


@lru_cache(maxsize=4)
def _tokenizer(folder: str) -> tuple[Any, str, dict[str, str]] | None:
    from tokenizers import Tokenizer

    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        return None
    template, special = load_chat_template(folder)
    return Tokenizer.from_file(str(path)), template, special


def _folder(spec: ModelSpec) -> str:
    """The adapter's folder when the trainer saved a tokenizer there, else the base's."""
    if spec.adapter and (Path(spec.adapter) / "tokenizer.json").is_file():
        return spec.adapter
    return spec.base


def exact_tokens(messages: list[Message], spec: ModelSpec | None) -> int | None:
    """Tokens the conversation takes as a prompt (with the assistant header) for this model,
    by its own tokenizer and template; None when they are not here or the template refuses."""
    loaded = _tokenizer(_folder(spec)) if spec is not None else None
    if loaded is None:
        return None
    tokenizer, template, special = loaded
    try:
        text = render(template, messages, add_generation_prompt=True, **special)
    except ChatTemplateError:
        return None  # a template that refuses this shape
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


def count_tokens(messages: list[Message], spec: ModelSpec | None = None) -> int:
    """Tokens the conversation takes as a prompt for this model: `exact_tokens`, else the
    rule-of-thumb estimate."""
    exact = exact_tokens(messages, spec)
    if exact is not None:
        return exact
    chars = sum(len(m["content"]) for m in messages)
    return -(-chars // CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE * len(messages)
