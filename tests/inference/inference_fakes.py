"""Small HTTP servers on 127.0.0.1 that speak the OpenAI and Ollama wire formats.

Each runs in a thread on a free port and records the requests it got. `mode` makes it
misbehave: "401", "404", "500" answer with that status (in the API's own error shape), "hang"
sleeps past any client timeout.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REPLY_PIECES = ["Hello", " there", ", friend", "!"]
REPLY = "".join(REPLY_PIECES)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (the timeout tests) is expected


class FakeServer:
    """A threaded HTTP server; subclasses' handlers answer `POST path`."""

    def __init__(self, model: str, mode: str = "ok", api_key: str | None = None) -> None:
        self.model, self.mode, self.api_key = model, mode, api_key
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                # A blob upload (Ollama's /api/blobs) is the file's bytes, everything else JSON.
                body = raw if fake.raw_body(self.path) else json.loads(raw or b"{}")
                fake.requests.append(
                    {
                        "method": "POST",
                        "path": self.path,
                        "body": body,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                    }
                )
                fake.handle(self, body)

            def do_GET(self) -> None:
                fake.requests.append({"method": "GET", "path": self.path, "body": None})
                fake.handle_get(self)

            def do_HEAD(self) -> None:
                fake.requests.append({"method": "HEAD", "path": self.path, "body": None})
                fake.handle_get(self)

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def handle(self, h: BaseHTTPRequestHandler, body: Any) -> None:
        raise NotImplementedError

    def handle_get(self, h: BaseHTTPRequestHandler) -> None:
        self.send_json(h, 404, {"error": f"no route GET {h.path}"})

    def raw_body(self, path: str) -> bool:
        return False

    @staticmethod
    def send_json(h: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    @staticmethod
    def send_stream(h: BaseHTTPRequestHandler, content_type: str, lines: list[str]) -> None:
        h.send_response(200)
        h.send_header("Content-Type", content_type)
        h.send_header("Connection", "close")
        h.end_headers()
        for line in lines:
            h.wfile.write(line.encode())
            h.wfile.flush()
            time.sleep(0.01)
        h.close_connection = True


class FakeOpenAI(FakeServer):
    """`POST /v1/chat/completions`, JSON or server-sent events, with bearer-token checks."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def handle(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        if h.path != "/v1/chat/completions":
            return self.send_json(h, 404, {"error": {"message": "no such route"}})
        if self.mode == "hang":
            time.sleep(5)
        given = (h.headers.get("Authorization") or "").removeprefix("Bearer ")
        if self.mode == "401" or (self.api_key and given != self.api_key):
            return self.send_json(
                h,
                401,
                {
                    "error": {
                        "message": f"Incorrect API key provided: {given}.",
                        "type": "invalid_request_error",
                        "code": "invalid_api_key",
                    }
                },
            )
        if self.mode == "404" or body.get("model") != self.model:
            return self.send_json(
                h,
                404,
                {
                    "error": {
                        "message": f"The model `{body.get('model')}` does not exist.",
                        "type": "invalid_request_error",
                        "code": "model_not_found",
                    }
                },
            )
        if self.mode == "500":
            return self.send_json(
                h, 500, {"error": {"message": "The server had an error.", "type": "server_error"}}
            )
        base = {"id": "chatcmpl-1", "created": 1700000000, "model": self.model}
        if not body.get("stream"):
            return self.send_json(
                h,
                200,
                {
                    **base,
                    "object": "chat.completion",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": REPLY},
                            "finish_reason": "stop",
                        }
                    ],
                },
            )
        chunks = [{"role": "assistant", "content": ""}] + [{"content": p} for p in REPLY_PIECES]
        lines = [
            f"data: {json.dumps({**base, 'object': 'chat.completion.chunk', 'choices': [{'index': 0, 'delta': d, 'finish_reason': None}]})}\n\n"
            for d in chunks
        ]
        lines.append("data: [DONE]\n\n")
        self.send_stream(h, "text/event-stream", lines)


class FakeOllama(FakeServer):
    """`POST /api/chat`, JSON or NDJSON, with Ollama's error bodies; and what registering a
    model takes (docs/api.md): `POST /api/blobs/sha256:<hex>` (the digest is checked: 201, or
    400), `HEAD` of a blob, `POST /api/create` from blobs (`files`, `template`, `system`,
    `parameters`; a stream of statuses ending in "success", 400 for a blob it does not have),
    `GET /api/tags`. A created model answers /api/chat too. mode "create-500" fails create."""

    def __init__(self, model: str, mode: str = "ok", api_key: str | None = None) -> None:
        super().__init__(model, mode, api_key)
        self.blobs: dict[str, bytes] = {}
        self.created: dict[str, dict[str, Any]] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def raw_body(self, path: str) -> bool:
        return path.startswith("/api/blobs/")

    def handle_get(self, h: BaseHTTPRequestHandler) -> None:
        if h.path == "/api/tags":
            names = [self.model, *self.created]
            return self.send_json(h, 200, {"models": [
                {"name": n, "model": n, "modified_at": "2026-01-01T00:00:00Z", "size": 1,
                 "digest": "0" * 64, "details": {}} for n in names]})  # fmt: skip
        if h.path.startswith("/api/blobs/"):
            known = h.path.removeprefix("/api/blobs/") in self.blobs
            h.send_response(200 if known else 404)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return None
        return super().handle_get(h)

    def handle(self, h: BaseHTTPRequestHandler, body: Any) -> None:
        if h.path.startswith("/api/blobs/"):
            digest = h.path.removeprefix("/api/blobs/")
            if digest != "sha256:" + hashlib.sha256(body).hexdigest():
                return self.send_json(h, 400, {"error": "digest mismatch"})
            self.blobs[digest] = body
            h.send_response(201)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return None
        if h.path == "/api/create":
            return self.create(h, body)
        return self.chat(h, body)

    def create(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        missing = [d for d in (body.get("files") or {}).values() if d not in self.blobs]
        if not body.get("files") or missing:
            return self.send_json(h, 400, {"error": f"invalid digest {missing}: blob not found"})
        if self.mode == "create-500":
            return self.send_json(h, 500, {"error": "unsupported architecture"})
        self.created[body["model"]] = body
        statuses = ["parsing GGUF", *[f"using existing layer {d}" for d in body["files"].values()]]
        statuses += ["creating new layer sha256:" + "1" * 64, "writing manifest", "success"]
        if body.get("stream") is False:
            return self.send_json(h, 200, {"status": "success"})
        self.send_stream(h, "application/x-ndjson",
                         [json.dumps({"status": s}) + "\n" for s in statuses])  # fmt: skip
        return None

    def chat(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        if self.mode == "hang":
            time.sleep(5)
        if self.mode == "404" or body.get("model") not in (self.model, *self.created):
            return self.send_json(
                h, 404, {"error": f'model "{body.get("model")}" not found, try pulling it first'}
            )
        if self.mode == "500":
            return self.send_json(h, 500, {"error": "llama runner process has terminated"})
        base = {"model": body.get("model"), "created_at": "2026-01-01T00:00:00Z"}
        if body.get("stream") is False:
            return self.send_json(
                h,
                200,
                {
                    **base,
                    "done": True,
                    "done_reason": "stop",
                    "message": {"role": "assistant", "content": REPLY},
                },
            )
        lines = [
            json.dumps({**base, "done": False, "message": {"role": "assistant", "content": p}})
            + "\n"
            for p in REPLY_PIECES
        ]
        lines.append(
            json.dumps(
                {
                    **base,
                    "done": True,
                    "done_reason": "stop",
                    "message": {"role": "assistant", "content": ""},
                }
            )
            + "\n"
        )
        self.send_stream(h, "application/x-ndjson", lines)
