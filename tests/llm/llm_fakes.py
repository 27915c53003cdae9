"""Local HTTP servers on 127.0.0.1 speaking the Anthropic Messages API and OpenAI chat completions.

Each runs in a thread on a free port, records every request (body, headers, arrival time),
counts how many are in flight at once (`peak`), and answers from a script: a FIFO of steps,
then `answer(prompt)` for everything after. A step is a dict:

    {"status": 429, "headers": {"retry-after": "1"}}   an error in the API's own shape
    {"stall": 2.0}                                       sleep, then answer normally (too late)
    {"text": "...", "refusal": True}                     a reply (refusal / empty text allowed)
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up on a stalled request is expected


class ScriptedServer:
    path = ""

    def __init__(
        self,
        script: list[dict[str, Any]] | None = None,
        answer: Callable[[str], dict[str, Any]] | None = None,
        delay: float = 0.0,
    ) -> None:
        self.script = list(script or [])
        self.answer = answer or (lambda prompt: {"text": f"echo: {prompt}"})
        self.delay = delay
        self.requests: list[dict[str, Any]] = []
        self.active = self.peak = 0
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with fake._lock:
                    fake.requests.append(
                        {
                            "path": self.path,
                            "body": body,
                            "headers": {k.lower(): v for k, v in self.headers.items()},
                            "at": time.monotonic(),
                        }
                    )
                    step = fake.script.pop(0) if fake.script else None
                    fake.active += 1
                    fake.peak = max(fake.peak, fake.active)
                try:
                    if self.path != fake.path:
                        fake.send(self, 404, {"error": {"message": f"no route {self.path}"}})
                        return
                    if fake.delay:
                        time.sleep(fake.delay)
                    step = step or fake.answer(fake.prompt_of(body))
                    if "stall" in step:
                        time.sleep(step["stall"])
                        step = fake.answer(fake.prompt_of(body))
                    if "status" in step:
                        fake.send(
                            self, step["status"], fake.error(step["status"]), step.get("headers")
                        )
                    else:
                        fake.send(self, 200, fake.reply(body, step))
                finally:
                    with fake._lock:
                        fake.active -= 1

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @staticmethod
    def send(
        h: BaseHTTPRequestHandler, status: int, payload: Any, headers: dict | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    def prompt_of(self, body: dict[str, Any]) -> str:
        return body["messages"][-1]["content"]

    def error(self, status: int) -> dict[str, Any]:
        raise NotImplementedError

    def reply(self, body: dict[str, Any], step: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError


class FakeAnthropic(ScriptedServer):
    """POST /v1/messages; point the client at `url` (the SDK adds /v1/messages)."""

    path = "/v1/messages"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def error(self, status: int) -> dict[str, Any]:
        kind = {429: "rate_limit_error", 401: "authentication_error", 529: "overloaded_error"}
        return {
            "type": "error",
            "error": {"type": kind.get(status, "api_error"), "message": f"scripted {status}"},
        }

    def reply(self, body: dict[str, Any], step: dict[str, Any]) -> dict[str, Any]:
        text = step.get("text", "")
        return {
            "id": f"msg_{len(self.requests)}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [{"type": "text", "text": text}] if text else [],
            "stop_reason": "refusal" if step.get("refusal") else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": step.get("input_tokens", 10), "output_tokens": 5},
        }


class FakeOpenAI(ScriptedServer):
    """POST /v1/chat/completions; `url` ends in /v1."""

    path = "/v1/chat/completions"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def error(self, status: int) -> dict[str, Any]:
        return {"error": {"message": f"scripted {status}", "type": "server_error", "code": None}}

    def reply(self, body: dict[str, Any], step: dict[str, Any]) -> dict[str, Any]:
        refusal = step.get("refusal")
        return {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": None if refusal is True else step.get("text", ""),
                        "refusal": "I can't help with that." if refusal is True else None,
                    },
                    "finish_reason": step.get("finish_reason", "stop"),
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }


def isolated_runs_dir(tmp_path: Path, monkeypatch) -> Path:
    """A fresh runs dir (so the response cache and synthetic/ live in tmp) and no Anthropic
    settings from the environment."""
    from dragonfarm_core.rundir import location

    root = tmp_path / "runs"
    root.mkdir()
    monkeypatch.setattr(location, "_configured", None)
    monkeypatch.setenv(location.ENV_VAR, str(root))
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return root
