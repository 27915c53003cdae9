"""`dragonfarm serve`: a run or model as an OpenAI-compatible chat-completions API.

    dragonfarm serve RUN_OR_MODEL [--host 127.0.0.1] [--port 8000] [--name NAME] [--base]
                     [--allowed-hosts NAMES]
    dragonfarm serve RUN/merged          # a merged model folder (named after its run)
    dragonfarm serve model.gguf [--ctx 4096]    # a GGUF, decoded by llama.cpp's llama-server

Then any OpenAI client talks to it, `dragon.backend_server` included:

    OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="none").chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": "Hello"}], stream=True)

Routes: `GET /v1/models`, `GET /v1/models/{id}`, `POST /v1/chat/completions` (with and
without `stream`, server-sent events). Generation goes through the local worker, the same one
`generate` and `chat` use, so the model is loaded once. There is no authentication: it binds
to 127.0.0.1 unless told otherwise, answers only to its own host names (127.0.0.1, localhost,
--host, --allowed-hosts / DRAGONFARM_ALLOWED_HOSTS), refuses a POST from another site's page
(see http_guard), takes only `application/json` bodies (a page can send text/plain without
asking first), and caps `max_tokens` at the model's context length.

A GGUF file is decoded by llama.cpp's own llama-server (`llama_server.LlamaServer`, on a
private port of 127.0.0.1), behind this same API and its host and origin checks: the routes,
the guards and the errors are the same whatever serves the tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from dragonfarm_core import http_guard
from dragonfarm_core.generation import target_for
from dragonfarm_core.inference.local import backend_local
from dragonfarm_core.inference.protocol import (
    Backend,
    InferenceError,
    Message,
    Sampling,
    check_messages,
)
from dragonfarm_core.inference.target import Target
from dragonfarm_core.rundir import files

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


def build_api(
    x: Any,
    backend: Backend | None = None,
    name: str | None = None,
    base: bool = False,
    allowed_hosts: Sequence[str] | None = None,
) -> FastAPI:
    """The API for one run or model; `name` is the model id clients pass (default: its name).
    `allowed_hosts`: the host names it answers to (default: loopback and
    DRAGONFARM_ALLOWED_HOSTS; see `http_guard.allowed_hosts`)."""
    backend = backend or backend_local()
    target = target_for(x, base, backend)
    name = name or target.name
    limit = context_length(target)
    hosts = http_guard.allowed_hosts() if allowed_hosts is None else list(allowed_hosts)
    app = FastAPI(
        title=f"dragonfarm: {name}",
        docs_url=None,
        redoc_url=None,
        middleware=http_guard.guard_middleware(hosts),
    )
    card = {"id": name, "object": "model", "created": int(time.time()), "owned_by": "dragonfarm"}

    @app.get("/v1/models")
    def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [card]}

    @app.get("/v1/models/{model_id:path}", response_model=None)
    def get_model(model_id: str) -> dict[str, Any] | JSONResponse:
        if model_id != name:
            return error(
                404,
                f"The model {model_id!r} does not exist; this server has {name!r}.",
                code="model_not_found",
            )
        return card

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(request: Request) -> Any:
        # A page on another site may POST text/plain without a CORS preflight; JSON it may not.
        if not is_json(request.headers.get("content-type")):
            return error(
                415,
                "Send the request as JSON with the header Content-Type: application/json "
                f"(got {request.headers.get('content-type') or 'no Content-Type'}).",
                code="unsupported_media_type",
            )
        try:
            body = await request.json()
        except ValueError:
            return error(400, "The request body is not JSON.")
        checked = read_request(body, name, limit)
        if isinstance(checked, JSONResponse):
            return checked
        messages, sampling = checked
        if body.get("stream"):
            return StreamingResponse(
                stream(backend, target, messages, sampling, name), media_type="text/event-stream"
            )
        return await _complete(backend, target, messages, sampling, name)

    return app


async def _complete(
    backend: Backend, target: Target, messages: list[Message], sampling: Sampling, name: str
) -> Any:
    from starlette.concurrency import run_in_threadpool

    try:
        text = await run_in_threadpool(backend.chat, target.spec, messages, sampling)
    except InferenceError as e:
        return error(500, str(e), kind="server_error")
    return completion(name, text)


def gguf_backend(path: str, name: str | None, ctx: int) -> tuple[Any, Backend, str]:
    """(the llama-server decoding the GGUF `path`, a backend for it, the model's name)."""
    from dragonfarm_core.inference.server import backend_server
    from dragonfarm_core.llama_cpp import find_llama_cpp
    from dragonfarm_core.llama_server import LlamaServer

    gguf = Path(path).expanduser().resolve()
    if not gguf.is_file():
        raise ValueError(f"{gguf} is not a file; pass a GGUF that dragon.export_gguf wrote.")
    name = name or gguf.stem
    server = LlamaServer.start(find_llama_cpp(), gguf, threads=os.cpu_count() or 2, ctx=ctx,
                               log=gguf.parent / f".{gguf.name}.serve.log")  # fmt: skip
    return server, backend_server(f"{server.url}/v1", name), name


def merged_run_name(path: str) -> str | None:
    """The run's id when `path` is a run's merged folder (<run>/merged/), else None."""
    folder = Path(path).expanduser()
    if folder.name == files.MERGED_DIR and files.is_run_dir(folder.parent):
        return str(files.read_config(folder.parent).get("id") or folder.parent.name)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dragonfarm serve", description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a run directory, a model id, a model folder (a merged one "
                        "too) or a GGUF file")  # fmt: skip
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--name", default=None, help="model id clients pass (default: its name)")
    parser.add_argument("--base", action="store_true", help="serve a run's base model")
    parser.add_argument(
        "--allowed-hosts", default=None, metavar="NAMES", help=http_guard.ALLOWED_HOSTS_HELP
    )
    parser.add_argument("--ctx", type=int, default=4096, help="a GGUF's context length")
    args = parser.parse_args(argv)
    import uvicorn

    from dragonfarm_core.llama_cpp import LlamaCppMissing
    from dragonfarm_core.llama_server import LlamaServerError

    server, backend, name = None, None, args.name or merged_run_name(args.model)
    try:
        hosts = http_guard.allowed_hosts(args.host, args.allowed_hosts)
        if str(args.model).lower().endswith(".gguf"):
            if args.base:
                raise ValueError("--base serves a run's base model; a GGUF has only its own.")
            server, backend, name = gguf_backend(args.model, name, args.ctx)
        app = build_api(args.model, backend=backend, name=name, base=args.base,
                        allowed_hosts=hosts)  # fmt: skip
    except (ValueError, OSError, TypeError, LlamaCppMissing, LlamaServerError) as e:
        if server is not None:
            server.stop()
        print(f"dragonfarm serve: {e}", file=sys.stderr)
        return 2
    served = app.title.removeprefix("dragonfarm: ")
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"Warning: {args.host} is reachable from other machines and this API has no "
            "authentication.",
            file=sys.stderr,
        )
    print(
        f"Serving {served!r} at http://{args.host}:{args.port}/v1 (OpenAI-compatible). "
        f"{http_guard.describe(hosts)} Ctrl+C stops.",
        flush=True,
    )
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
