"""The template check: the model's Jinja chat template and its Go translation for Ollama must
render the same prompt for fixed conversations and the run's held-out prompts.

The first difference is named by token (the merged tokenizer) and character; the record is
<run>/ollama/template_check.json (`ollama_export.serve_ollama` writes it). Known limits: Go
templates cannot trim, so a message with leading or trailing spaces reads differently for
templates that trim content (Gemma, Llama 3).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dragonfarm_core import chat_template
from dragonfarm_core.export.ollama.template import OllamaTemplate, jinja_prompt, ollama_prompt
from dragonfarm_core.rundir import files

# Held-out prompts the template check renders besides the fixed conversations.
CHECK_EVAL_PROMPTS = 4

# Conversations every template check renders: one turn, a system prompt, several turns, both;
# multi-line content, none with leading or trailing spaces (see the limits above).
FIXED_CONVERSATIONS: tuple[tuple[dict[str, str], ...], ...] = (
    ({"role": "user", "content": "My thermostat keeps dropping off Wi-Fi."},),
    (
        {"role": "system", "content": "You are a concise support agent."},
        {"role": "user", "content": "How do I cancel my subscription?"},
    ),
    (
        {"role": "user", "content": "My order arrived damaged."},
        {"role": "assistant", "content": "Sorry to hear that. Is the device itself broken?"},
        {"role": "user", "content": "Yes: the screen is cracked.\nThe box was crushed too."},
    ),
    (
        {"role": "system", "content": "Answer in one sentence.\nNever promise refunds."},
        {"role": "user", "content": "What is 12 plus 30?"},
        {"role": "assistant", "content": "12 plus 30 is 42."},
        {"role": "user", "content": "And 42 minus 2?"},
    ),
)


def eval_conversations(run_dir: Path, n: int = CHECK_EVAL_PROMPTS) -> list[list[dict[str, str]]]:
    """Up to `n` held-out prompts of the run, each up to its last user message."""
    path = files.data_path(run_dir, "eval")
    found: list[list[dict[str, str]]] = []
    for row in files.read_jsonl(path, tolerant=True) if path.is_file() else []:
        messages = row.get("messages") if isinstance(row, dict) else None
        if not isinstance(messages, list) and isinstance(row, dict):
            messages = row.get("prompt") if isinstance(row.get("prompt"), list) else None
        if not messages:
            continue
        messages = [m for m in messages if isinstance(m, dict)]
        while messages and messages[-1].get("role") == "assistant":
            messages = messages[:-1]
        if messages:
            found.append([{"role": str(m.get("role")), "content": str(m.get("content", ""))}
                          for m in messages])  # fmt: skip
        if len(found) >= n:
            break
    return found


def _token_diff(tokenizer: Any, expected: str, got: str) -> dict[str, Any] | None:
    """The first differing token of the two strings through the model's tokenizer."""
    if tokenizer is None:
        return None
    a = tokenizer.encode(expected, add_special_tokens=False).ids
    b = tokenizer.encode(got, add_special_tokens=False).ids
    for i in range(max(len(a), len(b))):
        x, y = (a[i] if i < len(a) else None), (b[i] if i < len(b) else None)
        if x != y:
            side = [{"id": t, "text": tokenizer.decode([t], skip_special_tokens=False)
                     if t is not None else "(ended)"} for t in (x, y)]  # fmt: skip
            return {"position": i, "expected": side[0], "ollama": side[1]}
    return None


def load_tokenizer(model_dir: str | os.PathLike[str]) -> Any:
    """The folder's fast tokenizer (tokenizer.json) through `tokenizers`, or None."""
    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def check_template(
    tmpl: OllamaTemplate,
    template: str,
    tokens: dict[str, str] | None = None,
    conversations: Sequence[tuple[str, Sequence[dict[str, str]]]] = (),
    tokenizer: Any = None,
) -> dict[str, Any]:
    """Render every (source, conversation) with the Jinja `template` and with `tmpl` as Ollama
    does; the record: identical, counts, and the first difference (conversation, character,
    token, both sides' text around it). A conversation the model's template refuses (a
    system message for Gemma 2) is skipped and counted."""
    tokens = dict(tokens or {})
    cases = list(conversations) or [("fixed", list(c)) for c in FIXED_CONVERSATIONS]
    checked, skipped = 0, 0
    difference = None
    for n, (source, messages) in enumerate(cases):
        try:
            expected = jinja_prompt(template, messages, tokens)
        except chat_template.ChatTemplateError:
            skipped += 1
            continue
        if tmpl.bos and expected.startswith(tmpl.bos):
            expected = expected[len(tmpl.bos) :]
        got = ollama_prompt(tmpl, messages)
        checked += 1
        if got == expected:
            continue
        at = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b),
                  min(len(expected), len(got)))  # fmt: skip
        difference = {
            "conversation": n,
            "source": source,
            "roles": [m.get("role") for m in messages],
            "char": at,
            "expected": expected[max(0, at - 40) : at + 40],
            "ollama": got[max(0, at - 40) : at + 40],
            "token": _token_diff(tokenizer, expected, got),
        }
        break
    return {
        "identical": difference is None and checked > 0,
        "family": tmpl.family,
        "checked": checked,
        "skipped": skipped,
        "first_difference": difference,
        "bos": tmpl.bos,
        "system": tmpl.system,
        "checked_at": files.now_iso(),
    }


def describe_difference(check: dict[str, Any]) -> str:
    """One sentence naming the first difference of a template check."""
    d = check.get("first_difference")
    if not d:
        return "identical" if check.get("identical") else "nothing was checked"
    token = d.get("token")
    where = f"conversation {d['conversation']} ({d['source']}, roles {'/'.join(d['roles'])})"
    if token:
        return (
            f"{where}, token {token['position']}: the model's template has "
            f"{token['expected']['text']!r} (id {token['expected']['id']}), Ollama's "
            f"{token['ollama']['text']!r} (id {token['ollama']['id']})"
        )
    return f"{where}, character {d['char']}: {d['expected']!r} vs {d['ollama']!r}"
