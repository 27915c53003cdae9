"""Show training records as the chat turns a model will see, for `Dataset.preview()`.

Every record kind becomes one message list. Preference pairs show both candidate replies, as
turns with the roles "chosen" and "rejected"; prompt datasets show the reference answer, when
there is one, as a "reference" turn. Those extra roles exist only in previews, never in training
files.
"""

from __future__ import annotations

import textwrap
from typing import Any


def preview_messages(records: list[dict[str, Any]]) -> list[list[dict[str, str]]]:
    """One message list per record, whatever its kind."""
    out = []
    for rec in records:
        if "messages" in rec:
            out.append([dict(m) for m in rec["messages"]])
        elif "chosen" in rec:
            out.append(
                [
                    *(dict(m) for m in rec["prompt"]),
                    {"role": "chosen", "content": rec["chosen"][0]["content"]},
                    {"role": "rejected", "content": rec["rejected"][0]["content"]},
                ]
            )
        else:
            ref = rec.get("reference")
            extra = [{"role": "reference", "content": ref}] if ref is not None else []
            out.append([*(dict(m) for m in rec["prompt"]), *extra])
    return out


def format_preview(messages: list[list[dict[str, str]]], title: str) -> str:
    """Plain text: a title, then each example's turns with their text indented under the role."""
    lines = [title]
    for i, conv in enumerate(messages, start=1):
        lines.append(f"--- example {i} ---")
        for msg in conv:
            lines.append(f"{msg['role']}:")
            lines.append(textwrap.indent(msg["content"], "  ", lambda _line: True))
    return "\n".join(lines)
