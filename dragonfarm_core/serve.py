"""`dragonfarm serve`: a run or model as an OpenAI-compatible chat-completions API.

    dragonfarm serve RUN_OR_MODEL [--host 127.0.0.1] [--port 8000] [--name NAME] [--base]
                     [--allowed-hosts NAMES]
    dragonfarm serve RUN/merged          # a merged model folder (named after its run)
    dragonfarm serve model.gguf [--ctx 4096]    # a GGUF, decoded by llama.cpp's llama-server
    dragonfarm serve RUN --llamacpp             # a run's f16 GGUF (exported once), the same way

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
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from dragonfarm_core import http_guard
from dragonfarm_core.generation import target_for
from dragonfarm_core.inference.llamacpp import backend_llamacpp
from dragonfarm_core.inference.local import backend_local
from dragonfarm_core.inference.protocol import (
    Backend,
    InferenceError,
    Message,
    Sampling,
)
from dragonfarm_core.inference.target import Target
from dragonfarm_core.rundir import files
from dragonfarm_core.serve_openai import (
    FALLBACK_CONTEXT as FALLBACK_CONTEXT,  # the reply cap for an unknown context: importable here
)
from dragonfarm_core.serve_openai import (
    completion,
    context_length,
    error,
    is_json,
    read_request,
    stream,
)


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
        return await _chat_completions(request, backend, target, name, limit)

    return app


async def _chat_completions(
    request: Request, backend: Backend, target: Target, name: str, limit: int | None
) -> Any:
    """POST /v1/chat/completions: the reply, streamed when asked, or the error to answer."""
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
    return server, backend_server(f"{server.url}/v1", name, api_key=server.api_key), name


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
    args = parser.parse_args(argv)
    import uvicorn

    from dragonfarm_core.gguf_files import GGUFError
    from dragonfarm_core.llama_cpp import LlamaCppMissing
    from dragonfarm_core.llama_server import LlamaServerError

    server, backend, name = None, None, args.name or merged_run_name(args.model)
    try:
        hosts = http_guard.allowed_hosts(args.host, args.allowed_hosts)
        if str(args.model).lower().endswith(".gguf"):
            if args.base:
                raise ValueError("--base serves a run's base model; a GGUF has only its own.")
            server, backend, name = gguf_backend(args.model, name, args.ctx)
        elif args.llamacpp:  # the run's GGUF, exported on demand (inference/llamacpp.py)
            if args.base:
                raise ValueError("--base needs the local worker; --llamacpp serves the run.")
            backend = backend_llamacpp(args.model, ctx=args.ctx)
            backend.gguf()  # export now (minutes, once), not in the first request
        app = build_api(args.model, backend=backend, name=name, base=args.base,
                        allowed_hosts=hosts)  # fmt: skip
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
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
