"""The OpenAI chat-completions wire format `dragonfarm serve` speaks: a request body read into
messages and sampling settings, or refused in OpenAI's error shape (`param` naming the field:
what the server cannot do, such as tools or JSON output, is refused rather than ignored;
`max_tokens` and the prompt are fitted to the model's context length), and a plain reply with
its finish_reason and usage. `serve_stream` writes the streamed reply; `serve.build_api` puts
both behind its routes.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fastapi.responses import JSONResponse

from dragonfarm_core.inference.protocol import Completion, Message, Sampling, check_messages
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
MAX_STOP = 4  # stop texts in one request, as OpenAI takes


def error(
    status: int,
    message: str,
    kind: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """An error in OpenAI's shape, which OpenAI clients turn into their own exceptions."""
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": param, "code": code}},
        status_code=status,
        headers=headers,
    )


class Refused(ValueError):
    """A request this server cannot answer as asked; `param` is the field that says so."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.code = param, code


def read_content(content: Any, where: str) -> Any:
    """A message's content: a string, or its text parts joined; other parts are refused."""
    if not isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        return content
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "text":
            raise Refused(
                f"{where}.content[{j}] is a {kind!r} part; this server's models read text "
                "only: send text parts.",
                param=f"{where}.content",
            )
    return "".join(p.get("text", "") for p in content)


def read_messages(raw: Any) -> list[Message]:
    """OpenAI messages (text parts joined, "developer" read as system) as training messages."""
    if not isinstance(raw, list):
        raise ValueError("messages must be a list.")
    out = []
    for i, m in enumerate(raw):
        content = read_content(m.get("content"), f"messages[{i}]") if isinstance(m, dict) else None
        role = m.get("role") if isinstance(m, dict) else None
        out.append({"role": "system" if role == "developer" else role, "content": content})
        if out[-1]["role"] not in ("system", "user", "assistant"):
            raise Refused(
                f"messages[{i}] has role {role!r}; this server takes system, user "
                "and assistant turns (no tools).",
                param="messages",
            )
    return check_messages(out)


def model_config(target: Target) -> dict[str, Any]:
    """The target's config.json (a multimodal model's text_config under it), or {} when it
    has none here (a server backend, a GGUF)."""
    if target.spec is None:
        return {}
    try:
        config = json.loads((Path(target.spec.base) / "config.json").read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(config, dict):
        return {}
    text = config.get("text_config")
    return {**text, **config} if isinstance(text, dict) else config


def _whole(config: dict[str, Any], key: str) -> int | None:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def context_length(target: Target) -> int | None:
    """How many tokens the target's model attends to, read from its config.json (no torch),
    or None when it is not known here."""
    config = model_config(target)
    return next((n for key in CONTEXT_KEYS if (n := _whole(config, key))), None)


def vocab_size(target: Target) -> int | None:
    """How many tokens the target's model has (logit_bias may name only those), or None."""
    return _whole(model_config(target), "vocab_size")


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


def read_stop(value: Any) -> tuple[str, ...]:
    """`stop`: a string or a list of up to MAX_STOP non-empty strings (OpenAI's limit)."""
    stop = [value] if isinstance(value, str) else value
    if stop is None:
        return ()
    if (
        not isinstance(stop, list)
        or len(stop) > MAX_STOP
        or not all(isinstance(s, str) and s for s in stop)
    ):
        raise Refused(
            f"stop must be a non-empty string or a list of up to {MAX_STOP} of them, got "
            f"{value!r}.",
            param="stop",
        )
    return tuple(stop)


# Fields this server cannot honour, each with when a value asks for something (a default or
# "off" value is accepted, as clients send those unasked) and what to do instead.
UNSUPPORTED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "tools": (bool, "this server calls no tools: leave tools out"),
    "functions": (bool, "this server calls no functions: leave functions out"),
    "tool_choice": (lambda v: v not in (None, "none", "auto"), "this server calls no tools"),
    "function_call": (lambda v: v not in (None, "none", "auto"), "this server calls no tools"),
    "response_format": (
        lambda v: v is not None and v != {"type": "text"},
        "this server cannot constrain replies to JSON: ask for JSON in the prompt, and send "
        'response_format {"type": "text"} or none',
    ),
    "logprobs": (bool, "this server returns no log probabilities: send logprobs false"),
    "top_logprobs": (bool, "this server returns no log probabilities: leave top_logprobs out"),
    "presence_penalty": (
        bool,
        "this server applies the model's own repetition penalty only: send 0",
    ),
    "frequency_penalty": (
        bool,
        "this server applies the model's own repetition penalty only: send 0",
    ),
    "audio": (bool, "this server answers in text only: leave audio out"),
    "modalities": (
        lambda v: v not in (None, ["text"]),
        'this server answers in text only: send ["text"]',
    ),
    "prediction": (bool, "this server takes no predicted output: leave prediction out"),
}


def refuse_unsupported(body: dict[str, Any]) -> None:
    """Refuse (naming the field) a request that asks for what this server cannot do, rather
    than answer as if it had been done."""
    for key, (asks, instead) in UNSUPPORTED.items():
        if asks(body.get(key)):
            raise Refused(f"{key} = {body[key]!r} is not supported: {instead}.", param=key)


def read_logit_bias(value: Any, vocab: int | None) -> tuple[tuple[int, float], ...]:
    """`logit_bias`: {"token id": bias from -100 to 100}, ids below the model's vocabulary."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise Refused(f"logit_bias must map token ids to biases, got {value!r}.", "logit_bias")
    pairs = []
    for key, bias in value.items():
        token = int(key) if isinstance(key, str) and key.isdigit() else None
        if token is None or (vocab is not None and token >= vocab):
            raise Refused(
                f"logit_bias names token {key!r}; this model's token ids run from 0 to "
                f"{'its vocabulary size' if vocab is None else vocab - 1}.",
                param="logit_bias",
            )
        if isinstance(bias, bool) or not isinstance(bias, int | float) or not -100 <= bias <= 100:
            raise Refused(f"logit_bias[{key!r}] = {bias!r}; use -100 to 100.", "logit_bias")
        pairs.append((token, float(bias)))
    return tuple(pairs)


def read_sampling(
    body: dict[str, Any], limit: int | None = None, vocab: int | None = None
) -> Sampling:
    default = Sampling()
    return Sampling(
        max_new_tokens=read_max_tokens(body, limit),
        temperature=_number(body, "temperature", default.temperature),
        top_p=_number(body, "top_p", default.top_p),
        seed=body.get("seed"),  # OpenAI's: the same request and seed give the same reply
        stop=read_stop(body.get("stop")),
        logit_bias=read_logit_bias(body.get("logit_bias"), vocab),
    )


@dataclass(frozen=True)
class ChatRequest:
    """A chat-completions body, read and checked."""

    messages: list[Message]
    sampling: Sampling
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage: a last chunk with usage
    max_tokens_given: bool = False  # False: max_tokens may shrink to what the context leaves


def read_request(
    body: Any, name: str, limit: int | None = None, vocab: int | None = None
) -> ChatRequest | JSONResponse:
    """The conversation and settings of a chat-completions body, or the error to answer;
    `limit` is the model's context length and `vocab` its vocabulary size (None: unknown)."""
    if not isinstance(body, dict):
        return error(400, "The request body must be a JSON object.")
    if body.get("model") is None:
        return error(400, f"model is required: send model={name!r}.", param="model")
    if body.get("model") != name:
        message = f"The model {body.get('model')!r} does not exist; this server has {name!r}."
        return error(404, message, code="model_not_found", param="model")
    if (body.get("n") or 1) != 1:
        return error(400, "n must be 1: this server returns one choice.", param="n")
    options = body.get("stream_options")
    try:
        refuse_unsupported(body)
        return ChatRequest(
            read_messages(body.get("messages")),
            read_sampling(body, limit, vocab),
            stream=bool(body.get("stream")),
            include_usage=isinstance(options, dict) and bool(options.get("include_usage")),
            max_tokens_given=any(
                body.get(k) is not None for k in ("max_tokens", "max_completion_tokens")
            ),
        )
    except Refused as e:
        return error(400, str(e), param=e.param, code=e.code)
    except (ValueError, TypeError) as e:
        return error(400, str(e))


def fit_context(chat: ChatRequest, prompt: int, limit: int) -> ChatRequest | JSONResponse:
    """The request with its reply fitted in the `limit` tokens the model attends to after its
    `prompt` tokens (max_tokens lowered when the client left it unset), or OpenAI's
    context_length_exceeded error."""
    asked = chat.sampling.max_new_tokens
    if prompt + (asked if chat.max_tokens_given else 1) <= limit:
        room = min(asked, limit - prompt)
        return replace(chat, sampling=replace(chat.sampling, max_new_tokens=room))
    return error(
        400,
        f"This model's maximum context length is {limit} tokens. However, you requested "
        f"{prompt + asked} tokens ({prompt} in the messages, {asked} in the completion). "
        "Please reduce the length of the messages or completion.",
        param="messages",
        code="context_length_exceeded",
    )


def usage(reply: Completion) -> dict[str, int]:
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
    }


def completion(name: str, reply: Completion) -> dict[str, Any]:
    message = {"role": "assistant", "content": reply.text}
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": name,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
        "usage": usage(reply),
    }


def is_json(content_type: str | None) -> bool:
    """application/json, with or without parameters (charset)."""
    return (content_type or "").split(";", 1)[0].strip().lower() == "application/json"
