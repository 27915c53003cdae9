"""Render a model's chat template without transformers, for previews in the app.

The app process must not import transformers, but the Mapping tab shows rows exactly as the
trainer will see them. Chat templates are jinja2, so this renders them in the same sandboxed
environment transformers uses (trim_blocks, lstrip_blocks, loop controls, `tojson`,
`raise_exception`, `strftime_now`). `learned_span` splits a conversation into the context the
trainer masks and the assistant turn it learns.

The facts about chat messages every side shares live here too: the `ROLES` a message may
have, and `stop_ids`, the tokens that end a reply (used by the inference worker and GRPO's
rollouts, with their already loaded model and tokenizer).
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROLES = ("system", "user", "assistant")
"""The roles of training and chat messages."""
CHATML_END = "<|im_end|>"

# For a model that ships no template (a base model): plain ChatML, which most tools understand.
DEFAULT_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class ChatTemplateError(ValueError):
    """A chat template failed to render, or refused the conversation."""


def stop_ids(model: Any, tokenizer: Any) -> list[int]:
    """Every token that ends a reply: the model's eos ids, the tokenizer's, ChatML's end (when
    the template uses it). `model` and `tokenizer` are transformers objects."""
    ids = model.generation_config.eos_token_id
    found = set(ids if isinstance(ids, list) else [] if ids is None else [ids])
    if tokenizer.eos_token_id is not None:
        found.add(tokenizer.eos_token_id)
    end = tokenizer.convert_tokens_to_ids(CHATML_END)
    if CHATML_END in (tokenizer.chat_template or "") and end != tokenizer.unk_token_id:
        found.add(end)
    return sorted(i for i in found if isinstance(i, int))


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(message)


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, **_: Any) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)


@lru_cache(maxsize=16)
def _compile(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(template)
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"The chat template does not parse: {e}") from e


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value


def load_chat_template(model_dir: str | Path) -> tuple[str, dict[str, str]]:
    """The model's chat template and its special tokens (bos_token, eos_token, ...).

    Looks in chat_template.jinja, then tokenizer_config.json; falls back to ChatML.
    """
    model_dir = Path(model_dir)
    config = {}
    config_path = model_dir / "tokenizer_config.json"
    if config_path.is_file():
        config = json.loads(config_path.read_text(encoding="utf-8"))
    tokens = {
        k: t
        for k in ("bos_token", "eos_token", "pad_token", "unk_token")
        if (t := _token_text(config.get(k))) is not None
    }
    jinja_file = model_dir / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8"), tokens
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: take the default one
        named = {t.get("name"): t.get("template") for t in template}
        template = named.get("default") or next(iter(named.values()), None)
    return (template or DEFAULT_CHAT_TEMPLATE), tokens


def render(
    template: str,
    messages: list[dict[str, str]],
    add_generation_prompt: bool = False,
    **special_tokens: str,
) -> str:
    """The conversation as text, exactly as the template lays it out."""
    try:
        return _compile(template).render(
            messages=messages, add_generation_prompt=add_generation_prompt, **special_tokens
        )
    except ChatTemplateError:
        raise
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"The chat template failed on this conversation: {e}") from e


def learned_span(
    template: str, messages: list[dict[str, str]], **special_tokens: str
) -> tuple[str, str]:
    """(context, learned): the masked text up to the assistant header, then the learned turn.

    The learned part is everything the full rendering adds after the prompt rendered with the
    generation prompt, which is what a completion-only loss trains on.
    """
    if not messages or messages[-1].get("role") != "assistant":
        raise ChatTemplateError("The last message must be the assistant turn that is learned.")
    prompt = render(template, messages[:-1], add_generation_prompt=True, **special_tokens)
    full = render(template, messages, add_generation_prompt=False, **special_tokens)
    if full.startswith(prompt):
        return prompt, full[len(prompt) :]
    # Templates that rewrite earlier turns (e.g. strip reasoning) break the prefix: split at
    # the longest common prefix instead.
    n = 0
    while n < min(len(prompt), len(full)) and prompt[n] == full[n]:
        n += 1
    return full[:n], full[n:]
