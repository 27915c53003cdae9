"""The OpenAI chat-completions wire format `dragonfarm serve` speaks: a request body read into
messages and sampling settings (refused in OpenAI's error shape, `max_tokens` capped at the
model's context length), and the replies: one completion, or server-sent events while the
backend generates. `serve.build_api` puts it behind its routes.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastapi.responses import JSONResponse

from dragonfarm_core.inference.protocol import (
    Backend,
    Message,
    Sampling,
    check_messages,
)
from dragonfarm_core.inference.target import Target

# config.json keys that hold how many positions (prompt and reply together) a model attends to,
# in the order transformers' own configs use them (Llama/Qwen, GPT-2, others).
CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_sequence_length",
    "seq_length",
    "n_ctx",
)
# When the model does not say (a server backend, an unusual config): no reply may be longer.
FALLBACK_CONTEXT = 32_768


def error(
    status: int, message: str, kind: str = "invalid_request_error", code: str | None = None
) -> JSONResponse:
    """An error in OpenAI's shape, which OpenAI clients turn into their own exceptions."""
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": None, "code": code}},
        status_code=status,
    )


def read_messages(raw: Any) -> list[Message]:
    """OpenAI messages (text parts joined, "developer" read as system) as training messages."""
    if not isinstance(raw, list):
        raise ValueError("messages must be a list.")
    out = []
    for i, m in enumerate(raw):
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
            content = "".join(
                p.get("text", "")
                for p in content
                if isinstance(p, dict) and p.get("type") == "text"
            )
        role = m.get("role") if isinstance(m, dict) else None
        out.append({"role": "system" if role == "developer" else role, "content": content})
        if out[-1]["role"] not in ("system", "user", "assistant"):
            raise ValueError(
                f"messages[{i}] has role {role!r}; this server takes system, user "
                "and assistant turns (no tools)."
            )
    return check_messages(out)


def context_length(target: Target) -> int | None:
    """How many tokens the target's model attends to, read from its config.json (no torch;
    a multimodal model keeps it under text_config), or None when it is not known here."""
    if target.spec is None:
        return None
    try:
        config = json.loads((Path(target.spec.base) / "config.json").read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    for section in (config, config.get("text_config")):
        if not isinstance(section, dict):
            continue
        for key in CONTEXT_KEYS:
            value = section.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def _number(body: dict[str, Any], key: str, default: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key} must be a number, got {value!r}.")
    return float(value)


def read_max_tokens(body: dict[str, Any], limit: int | None) -> int:
    """max_completion_tokens (or the older max_tokens): a whole number from 1 to the model's
    context length, so no request can keep the worker generating for ever."""
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    value = body.get(key)
    cap = limit or FALLBACK_CONTEXT
    if value is None:
        return min(Sampling().max_new_tokens, cap)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} must be a whole number of tokens, got {value!r}.")
    if value < 1:
        raise ValueError(f"{key} = {value}; ask for 1 token or more.")
    if value > cap:
        whose = (
            f"this model's context length is {cap} tokens"
            if limit
            else f"this server caps replies at {cap} tokens (the model's context length is "
            "not known here)"
        )
        raise ValueError(f"{key} = {value} is too large: {whose}. Ask for at most {cap}.")
    return value


def read_sampling(body: dict[str, Any], limit: int | None = None) -> Sampling:
    default = Sampling()
    return Sampling(
        max_new_tokens=read_max_tokens(body, limit),
        temperature=_number(body, "temperature", default.temperature),
        top_p=_number(body, "top_p", default.top_p),
        seed=body.get("seed"),  # OpenAI's: the same request and seed give the same reply
    )


def read_request(
    body: Any, name: str, limit: int | None = None
) -> tuple[list[Message], Sampling] | JSONResponse:
    """The conversation and settings of a chat-completions body, or the error to answer;
    `limit` is the model's context length (None: unknown)."""
    if not isinstance(body, dict):
        return error(400, "The request body must be a JSON object.")
    if body.get("model") != name:
        message = f"The model {body.get('model')!r} does not exist; this server has {name!r}."
        return error(404, message, code="model_not_found")
    if (body.get("n") or 1) != 1:
        return error(400, "n must be 1: this server returns one choice.")
    try:
        return read_messages(body.get("messages")), read_sampling(body, limit)
    except (ValueError, TypeError) as e:
        return error(400, str(e))


def completion(name: str, text: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": name,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
    }


def stream(
    backend: Backend, target: Target, messages: list[Message], sampling: Sampling, name: str
) -> Iterator[str]:
    """Server-sent events: a role chunk, a chunk per piece, a stop chunk, then [DONE]."""
    pieces: queue.Queue[tuple[str, str | None]] = queue.Queue()

    def work() -> None:
        try:
            backend.chat(target.spec, messages, sampling, lambda t: pieces.put(("token", t)))
            pieces.put(("done", None))
        except Exception as e:  # reported to the client in the stream
            pieces.put(("error", str(e)))

    threading.Thread(target=work, daemon=True, name="dragonfarm-serve-stream").start()
    base = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": name,
    }

    def chunk(delta: dict[str, str], finish: str | None = None) -> str:
        body = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    while True:
        kind, value = pieces.get()
        if kind == "token":
            yield chunk({"content": value or ""})
            continue
        if kind == "done":
            yield chunk({}, "stop")
        else:
            yield f"data: {json.dumps({'error': {'message': value, 'type': 'server_error'}})}\n\n"
        break
    yield "data: [DONE]\n\n"


def is_json(content_type: str | None) -> bool:
    """application/json, with or without parameters (charset)."""
    return (content_type or "").split(";", 1)[0].strip().lower() == "application/json"
