"""`dragonfarm serve`: a run or model as an OpenAI-compatible chat-completions API.

    dragonfarm serve RUN_OR_MODEL [--host 127.0.0.1] [--port 8000] [--name NAME] [--base]
                     [--allowed-hosts NAMES] [--queue 16]
    dragonfarm serve RUN/merged          # a merged model folder (named after its run)
    dragonfarm serve model.gguf [--ctx 4096]    # a GGUF, decoded by llama.cpp's llama-server
    dragonfarm serve RUN --llamacpp             # a run's f16 GGUF (exported once), the same way

Then any OpenAI client talks to it, `dragon.backend_server` included:

    OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="none").chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": "Hello"}], stream=True)

Routes: `GET /v1/models`, `GET /v1/models/{id}`, `POST /v1/chat/completions` (with and
without `stream`, server-sent events); any other route, `/v1/completions` included, is a 404 in
OpenAI's error shape naming them. Which request fields are honoured and which are refused is
`serve/openai_wire.py`'s (docs/SERVE.md has the table). Generation goes through the local worker, the same
one `generate` and `chat` use, so the model is loaded once; requests wait their turn for it in
a bounded line (`serve_queue`: past `--queue` waiting, 429 with Retry-After). There is no
authentication: it binds to 127.0.0.1 unless told otherwise, answers only to its own host
names (127.0.0.1, localhost, --host, --allowed-hosts / DRAGONFARM_ALLOWED_HOSTS), refuses a
POST from another site's page (see http_guard), takes only `application/json` bodies (a page
can send text/plain without asking first) of at most MAX_BODY_BYTES, and refuses a prompt and
`max_tokens` past the model's context length before any work. SIGTERM stops it as Ctrl+C
does: the worker (or llama-server) ends with it and the worker's log is removed.

A GGUF file is decoded by llama.cpp's own llama-server (`llama_server.LlamaServer`, on a
private port of 127.0.0.1), behind this same API and its host and origin checks: the routes,
the guards and the errors are the same whatever serves the tokens. Its context is `--ctx`
tokens, and a prompt past it is refused the same way, counted by llama-server's own chat
template and tokenizer (`llama_tokens`: no decoding) before the request takes its turn.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from dragonfarm_core.auth import http_guard
from dragonfarm_core.conversation.generation import target_for
from dragonfarm_core.inference.llamacpp import backend_llamacpp
from dragonfarm_core.inference.local import backend_local
from dragonfarm_core.inference.protocol import (
    Backend,
    Completion,
    InferenceError,
    Message,
    ModelSpec,
    OnToken,
    Sampling,
)
from dragonfarm_core.inference.target import Target
from dragonfarm_core.inference.tokens import exact_tokens
from dragonfarm_core.rundir import files
from dragonfarm_core.serve.openai_wire import (
    FALLBACK_CONTEXT as FALLBACK_CONTEXT,  # the reply cap for an unknown context: importable here
)
from dragonfarm_core.serve.openai_wire import (
    completion,
    context_length,
    error,
    fit_context,
    is_json,
    read_request,
    vocab_size,
)
from dragonfarm_core.serve.queue import Job, Line
from dragonfarm_core.serve.stream import stream

# The largest request body read: far above any context's worth of text (a 32k-token context
# is about 128 KB of text, 768 KB if every character came \u-escaped), far below memory.
MAX_BODY_BYTES = 8 * 2**20
WAITING = 16  # requests that may wait while one is answered (--queue)
# After SIGTERM or Ctrl+C, how long replies in progress may go on before they are cancelled.
SHUTDOWN_GRACE_S = 3


# Tokens a conversation takes as a prompt, or None when they cannot be counted here.
PromptCounter = Callable[[list[Message]], int | None]
# A model's context length (tokens) and its PromptCounter.
Context = tuple[int | None, PromptCounter]


class Serving(Backend, Protocol):
    """A backend `dragonfarm serve` can put behind the API: one that reports why a reply
    ended and its token counts (local, server, llama.cpp)."""

    def complete(
        self,
        model: ModelSpec | None,
        messages: list[Message],
        sampling: Sampling,
        on_token: OnToken | None = None,
    ) -> Completion: ...


def build_api(
    x: Any,
    backend: Serving | None = None,
    name: str | None = None,
    base: bool = False,
    allowed_hosts: Sequence[str] | None = None,
    waiting: int = WAITING,
    context: Context | None = None,
) -> FastAPI:
    """The API for one run or model; `name` is the model id clients pass (default: its name).
    `allowed_hosts`: the host names it answers to (default: loopback and
    DRAGONFARM_ALLOWED_HOSTS; see `http_guard.allowed_hosts`). `waiting`: how many requests
    may wait while one is answered (more are told to retry: 429). `context`: the context
    length and a prompt counter where the model's config.json and tokenizer are not here (a
    GGUF: llama-server's own); by default both come from the model folder."""
    backend = backend or backend_local()
    target = target_for(x, base, backend)
    name = name or target.name
    limit, count = context or (context_length(target), partial(exact_tokens, spec=target.spec))
    served = Served(backend, target, name, limit, count, vocab_size(target), Line(waiting))
    hosts = http_guard.allowed_hosts() if allowed_hosts is None else list(allowed_hosts)
    app = FastAPI(
        title=f"dragonfarm: {name}",
        docs_url=None,
        redoc_url=None,
        middleware=http_guard.guard_middleware(hosts),
    )
    app.add_exception_handler(StarletteHTTPException, no_route)
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
        return await _chat_completions(request, served)

    @app.post("/v1/completions", response_model=None)
    def completions() -> JSONResponse:
        return error(
            404,
            "This server has no text-completions route (/v1/completions): send the prompt as "
            "a user message to POST /v1/chat/completions.",
            code="unknown_url",
        )

    return app


@dataclass(frozen=True)
class Served:
    """What the routes answer with: the backend, the model and its context, the line."""

    backend: Serving
    target: Target
    name: str
    limit: int | None
    count: PromptCounter
    vocab: int | None
    line: Line


async def no_route(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's own errors (an unknown route, a wrong method) in OpenAI's shape."""
    status = getattr(exc, "status_code", 500)
    routes = "GET /v1/models, GET /v1/models/{id} and POST /v1/chat/completions"
    return error(
        status,
        f"{request.method} {request.url.path} is not a route of this server ({status}); it "
        f"has {routes}.",
        code="unknown_url" if status == 404 else None,
    )


async def read_body(request: Request) -> Any:
    """The JSON body, or the error to answer: too large (by its Content-Length, before it is
    read, or once MAX_BODY_BYTES have arrived), not JSON, or not sent as JSON."""
    # A page on another site may POST text/plain without a CORS preflight; JSON it may not.
    if not is_json(request.headers.get("content-type")):
        return error(
            415,
            "Send the request as JSON with the header Content-Type: application/json "
            f"(got {request.headers.get('content-type') or 'no Content-Type'}).",
            code="unsupported_media_type",
        )
    too_large = error(
        413,
        f"The request body is larger than this server takes ({MAX_BODY_BYTES // 2**20} MiB).",
        code="request_too_large",
    )
    length = request.headers.get("content-length") or ""
    if length.isdigit() and int(length) > MAX_BODY_BYTES:
        return too_large
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > MAX_BODY_BYTES:
            return too_large
    try:
        return json.loads(body)
    except ValueError:
        return error(400, "The request body is not JSON.")


async def _chat_completions(request: Request, served: Served) -> Any:
    """POST /v1/chat/completions: the reply, streamed when asked, or the error to answer."""
    body = await read_body(request)
    if isinstance(body, JSONResponse):
        return body
    chat = read_request(body, served.name, served.limit, served.vocab)
    if isinstance(chat, JSONResponse):
        return chat
    if served.limit is not None:
        prompt = await run_in_threadpool(served.count, chat.messages)
        chat = chat if prompt is None else fit_context(chat, prompt, served.limit)
        if isinstance(chat, JSONResponse):
            return chat
    line = served.line
    if not line.join():
        return error(
            429,
            f"This server is answering one request and {line.waiting} more are waiting; "
            f"retry in {line.retry_after()} s.",
            kind="rate_limit_exceeded",
            code="queue_full",
            headers={"Retry-After": str(line.retry_after())},
        )
    if not await line.wait_turn(request):
        return error(499, "The client closed the request.")  # read by nobody
    job = Job(partial(served.backend.complete, served.target.spec, chat.messages,
                      chat.sampling), line.release)  # fmt: skip
    if chat.stream:
        return StreamingResponse(stream(job, chat, served.name), media_type="text/event-stream")
    reply = await job.result(request)
    if isinstance(reply, Completion):
        return completion(served.name, reply)
    return error(500, reply or "The client closed the request.", kind="server_error")


def gguf_backend(path: str, name: str | None, ctx: int) -> tuple[Any, Serving, str]:
    """(the llama-server decoding the GGUF `path`, a backend for it, the model's name); its
    context is `ctx` tokens, counted by `llama_tokens(server)`."""
    from dragonfarm_core.inference.server import backend_server
    from dragonfarm_core.llamacpp.location import find_llama_cpp
    from dragonfarm_core.llamacpp.server import LlamaServer

    gguf = Path(path).expanduser().resolve()
    if not gguf.is_file():
        raise ValueError(f"{gguf} is not a file; pass a GGUF that dragon.export_gguf wrote.")
    name = name or gguf.stem
    server = LlamaServer.start(find_llama_cpp(), gguf, threads=os.cpu_count() or 2, ctx=ctx,
                               log=gguf.parent / f".{gguf.name}.serve.log")  # fmt: skip
    return server, backend_server(f"{server.url}/v1", name, api_key=server.api_key), name


def llama_tokens(server: Callable[[], Any]) -> PromptCounter:
    """A prompt counter asking llama-server (`server()`, started if need be) for the tokens
    its chat template and tokenizer make of a conversation: no decoding, milliseconds. None
    when it cannot answer (the request then fails as the backend says)."""
    from dragonfarm_core.llamacpp.server import LlamaServerError

    def count(messages: list[Message]) -> int | None:
        try:
            running = server()
            return len(running.tokenize(running.apply_template(messages)))
        except (LlamaServerError, InferenceError, OSError, ValueError, KeyError):
            return None

    return count


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
    parser.add_argument("--llamacpp", action="store_true", help="decode a run or model folder "
                        "with llama.cpp (its f16 GGUF, exported once)")  # fmt: skip
    parser.add_argument("--queue", type=int, default=WAITING, metavar="N", help="requests that "
                        f"may wait while one is answered (default {WAITING}); more get 429")  # fmt: skip
    args = parser.parse_args(argv)
    # SIGTERM ends the process through Python, so the `finally` below and the exit handlers
    # (worker_stop: the worker and its log) run; uvicorn re-raises it after its shutdown.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    try:
        return _serve(args)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from dragonfarm_core.export.gguf_files import GGUFError
    from dragonfarm_core.llamacpp.location import LlamaCppMissing
    from dragonfarm_core.llamacpp.server import LlamaServerError

    server, name = None, args.name or merged_run_name(args.model)
    backend: Serving | None = None
    context: Context | None = None  # llama-server's: no config.json or tokenizer.json here
    try:
        hosts = http_guard.allowed_hosts(args.host, args.allowed_hosts)
        if args.queue < 0:
            raise ValueError(f"--queue {args.queue}: use 0 or more waiting requests.")
        if str(args.model).lower().endswith(".gguf"):
            if args.base:
                raise ValueError("--base serves a run's base model; a GGUF has only its own.")
            server, backend, name = gguf_backend(args.model, name, args.ctx)
            context = (args.ctx, llama_tokens(lambda: server))
        elif args.llamacpp:  # the run's GGUF, exported on demand (inference/llamacpp.py)
            if args.base:
                raise ValueError("--base needs the local worker; --llamacpp serves the run.")
            backend = llamacpp = backend_llamacpp(args.model, ctx=args.ctx)
            llamacpp.gguf()  # export now (minutes, once), not in the first request
            context = (args.ctx, llama_tokens(llamacpp.running))
        app = build_api(args.model, backend=backend, name=name, base=args.base,
                        allowed_hosts=hosts, waiting=args.queue, context=context)  # fmt: skip
    except (ValueError, OSError, TypeError, LlamaCppMissing, LlamaServerError, GGUFError,
            InferenceError) as e:  # fmt: skip
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
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning",
                    timeout_graceful_shutdown=SHUTDOWN_GRACE_S)  # fmt: skip
    finally:
        if server is not None:
            server.stop()
            server.log.unlink(missing_ok=True)  # a clean stop leaves nothing beside the GGUF
    return 0


if __name__ == "__main__":
    sys.exit(main())
