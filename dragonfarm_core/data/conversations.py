"""`conversations()`: whole chat transcripts as training data.

    ds = dragon.conversations([[{"role": "user", "content": "Hi"},
                                {"role": "assistant", "content": "Hello! How can I help?"}]])
    ds = dragon.conversations("transcripts.jsonl")   # rows like {"messages": [...]}

Each conversation is a list of {"role", "content"} messages: roles system (first only), user
and assistant; content a non-empty string; at least one user turn; the last turn the
assistant's, which is the one the model learns. Errors name the conversation (list index, or
file line/item) and the message index.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from dragonfarm_core.chat_template import ROLES
from dragonfarm_core.data.cells import check_utf8
from dragonfarm_core.data.dataset import Dataset
from dragonfarm_core.data.errors import DatasetError
from dragonfarm_core.data.jsonfiles import read_json_items, read_jsonl_items
from dragonfarm_core.data.readers import check_file, detect_format, read_text
from dragonfarm_core.data.records import Mapping

# Role names from other chat formats (ShareGPT, Gemini), so the error can say what to write.
ROLE_HINTS = {"human": "user", "gpt": "assistant", "model": "assistant", "bot": "assistant"}


def _check_message(msg: Any, where: str) -> dict[str, str]:
    if not isinstance(msg, dict):
        raise DatasetError(
            f"{where}: expected an object with 'role' and 'content', got {msg!r:.60}."
        )
    role, content = msg.get("role"), msg.get("content")
    if role not in ROLES:
        low = str(role).lower()
        hint = ROLE_HINTS.get(low) or (low if low in ROLES else None)
        extra = f" Write {hint!r} instead." if hint else ""
        raise DatasetError(f"{where}: unknown role {role!r}; roles are {', '.join(ROLES)}.{extra}")
    if not isinstance(content, str) or not content.strip():
        raise DatasetError(
            f"{where} ({role}): content must be a non-empty string, got {content!r:.60}. "
            f"Fill in the text or remove the message."
        )
    check_utf8(content, f"{where} ({role})")
    return {"role": role, "content": content}


def check_conversation(conv: Any, where: str) -> list[dict[str, str]]:
    """The conversation's messages (role and content only), or a `DatasetError` saying why not."""
    if isinstance(conv, dict) and "messages" in conv:
        conv = conv["messages"]
    if not isinstance(conv, list) or not conv:
        raise DatasetError(
            f"{where}: a conversation must be a non-empty list of messages "
            f"({{'role': ..., 'content': ...}}), got {conv!r:.60}."
        )
    messages = [_check_message(m, f"{where}, message {j}") for j, m in enumerate(conv)]
    for j, msg in enumerate(messages):
        if msg["role"] == "system" and j > 0:
            raise DatasetError(
                f"{where}, message {j}: a system message may only come first; "
                f"move it to the start or make it a user turn."
            )
    if not any(m["role"] == "user" for m in messages):
        raise DatasetError(
            f"{where}: there is no user turn; add the user's message before the reply."
        )
    if messages[-1]["role"] != "assistant":
        raise DatasetError(
            f"{where}, message {len(messages) - 1}: the conversation ends with a "
            f"{messages[-1]['role']} turn, but it must end with the assistant's reply, the turn "
            f"the model learns. Add the reply or drop the trailing turns."
        )
    return messages


def _file_items(path: Path) -> tuple[list[tuple[str, Any]], str]:
    path = check_file(path)
    fmt = detect_format(path, None)
    if fmt not in ("json", "jsonl"):
        raise DatasetError(
            f"{path}: conversations are read from JSON Lines or JSON files with a 'messages' "
            f"list per row, not {fmt}. For a table of prompts and replies use dragon.dataset()."
        )
    text = read_text(path)
    items = (
        read_json_items(path, text)
        if fmt == "json"
        else list(read_jsonl_items(path, text.split("\n")))
    )
    out = []
    for where, obj in items:
        if not isinstance(obj.get("messages"), list):
            hint = (
                " (ShareGPT's 'conversations' with from/value?)" if "conversations" in obj else ""
            )
            raise DatasetError(
                f"{path}, {where}: no 'messages' list{hint}; each row must look like "
                f'{{"messages": [{{"role": "user", "content": ...}}, ...]}}. Keys found: '
                f"{', '.join(map(repr, obj)) or 'none'}."
            )
        out.append((f"{path}, {where}", obj["messages"]))
    return out, fmt


def conversations(x: list[Any] | str | os.PathLike[str], name: str | None = None) -> Dataset:
    """A dataset of whole conversations: a list of message lists, or a JSON/JSONL file path."""
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise DatasetError(f"name must be a non-empty string, got {name!r}.")
    source: str | None = None
    if isinstance(x, str | os.PathLike):
        path = Path(x).expanduser().resolve()
        items, fmt = _file_items(path)
        source, default_name = str(path), path.stem
    elif isinstance(x, list | tuple):
        if not x:
            raise DatasetError("conversations() got an empty list; pass at least one conversation.")
        items = [(f"conversation {i}", conv) for i, conv in enumerate(x)]
        fmt, default_name = "list", "conversations"
    else:
        raise DatasetError(
            f"conversations() takes a list of conversations or a JSON/JSONL path, "
            f"got {type(x).__name__}."
        )
    convs = [check_conversation(conv, where) for where, conv in items]
    cells = [json.dumps(c, ensure_ascii=False) for c in convs]
    frame = pd.DataFrame({"messages": pd.Series(cells, dtype=object)})
    return Dataset(
        frame,
        name=name or default_name,
        source=source,
        format=fmt,
        mapping=Mapping("conversations"),
    )
