"""How much one request, and one browser session, may send to the app.

Gradio caps each uploaded file (`max_file_size`) but not a request: one upload of many files
under the cap, or a script uploading again and again, fills the disk. This ASGI middleware
counts every request body, by its Content-Length when it has one (refused before anything is
read) and byte by byte as it streams (a chunked body has none), against a per-request cap and
a per-session total. A session is a browser's session cookie, which the middleware hands out on
its first answer; a request without a known cookie (curl, a script) counts against its client
address instead, so dropping the cookie does not reset the count. Every body counts (a file can
also arrive as base64 inside JSON), but only uploads come near the caps. Pure Starlette.

A new cookie does reset a session's count, so the app's uploads are also capped as a whole:
an upload (a POST to a path ending in /upload) is refused when the disk uploads already use
(`in_use`, see upload_disk.py), the uploads under way and this body together pass
`max_total_mb`, whichever session sends it.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Callable

import anyio
from starlette.datastructures import Headers, MutableHeaders
from starlette.formparsers import MultiPartException
from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MB = 1024 * 1024  # Gradio's "mb"
# Multipart framing around the files (boundaries, part headers, the form fields Gradio adds),
# so one file at Gradio's max_file_size of the same number of MB still fits a request.
FORM_OVERHEAD = 64 * 1024
MAX_SESSIONS = 10_000  # the oldest session's count is forgotten past this many


class BodyTooLarge(MultiPartException):
    """Raised from `receive` when a body passes a cap. A MultiPartException, so a multipart
    parser that is reading it (Starlette's, Gradio's) deletes its half-written temp files as
    it does for its own size limit."""

    def __init__(self, message: str) -> None:
        super().__init__(message)


def _mb(n: int) -> str:
    return f"{n / MB:.1f} MB"


class UploadCaps:
    """Refuses (413) a request body over `max_request_mb` (plus its form framing), any body
    once a session has sent `max_session_mb` in all, and an upload that would take the disk
    uploads use (`in_use()`, bytes) past `max_total_mb`. `hint` ends each refusal (which
    settings to change)."""

    def __init__(
        self, app: ASGIApp, max_request_mb: int, max_session_mb: int, hint: str = "",
        max_total_mb: int | None = None, in_use: Callable[[], int] | None = None,
    ) -> None:  # fmt: skip
        self.app = app
        self.request_mb, self.session_mb = max_request_mb, max_session_mb
        self.max_request = max_request_mb * MB + FORM_OVERHEAD
        self.max_session = max_session_mb * MB
        self.total_mb, self.in_use = max_total_mb, in_use
        self.uploading = 0  # bytes of uploads received and not answered yet
        self.hint = hint
        # Per app: two apps on one host (cookies ignore the port) keep separate sessions.
        self.cookie = f"dragonfarm-session-{secrets.token_hex(4)}"
        # session token (or "client:ADDRESS") -> bytes received. Only the event loop touches
        # it, between awaits, so it needs no lock.
        self.sent: OrderedDict[str, int] = OrderedDict()

    def _count(self, key: str, n: int) -> int:
        self.sent[key] = self.sent.get(key, 0) + n
        self.sent.move_to_end(key)
        while len(self.sent) > MAX_SESSIONS:
            self.sent.popitem(last=False)
        return self.sent[key]

    def _over_request(self, size: int) -> str:
        return (
            f"This request sends {_mb(size)}; the app takes at most {self.request_mb} MB in "
            f"one request (all its files together). Upload fewer or smaller files at a "
            f"time.{self.hint}"
        )

    def _over_session(self, total: int) -> str:
        return (
            f"This browser session has sent {_mb(total)} to the app, more than the "
            f"{self.session_mb} MB one session may upload in all. Restart the app (or "
            f"reopen it in a new browser session) to upload more.{self.hint}"
        )

    def _over_total(self, total: int) -> str:
        return (
            f"The app's uploads would take {_mb(total)} of disk with this one, more than the "
            f"{self.total_mb} MB it keeps for all uploads together. Uploads no run uses are "
            f"removed after a day; try again later, or run dragonfarm on your own machine."
            f"{self.hint}"
        )

    async def _total_before(self, scope: Scope) -> int | None:
        """Bytes uploads hold before this request, when it is an upload under a total cap."""
        upload = scope.get("method") == "POST" and scope.get("path", "").endswith("/upload")
        if not upload or self.total_mb is None or self.in_use is None:
            return None
        return await anyio.to_thread.run_sync(self.in_use) + self.uploading

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        token = cookie_parser(headers.get("cookie", "")).get(self.cookie)
        issue: str | None = None  # a new session's cookie, handed out with this answer
        if token is not None and token in self.sent:
            key = token
        else:
            key = f"client:{(scope.get('client') or ('unknown', 0))[0]}"
            issue = secrets.token_urlsafe(18)

        refusal: str | None = None
        before = await self._total_before(scope)
        limit = None if self.total_mb is None else self.total_mb * MB
        declared = headers.get("content-length", "")
        if declared.isdigit():
            if int(declared) > self.max_request:
                refusal = self._over_request(int(declared))
            elif self.sent.get(key, 0) + int(declared) > self.max_session:
                refusal = self._over_session(self.sent.get(key, 0) + int(declared))
            elif before is not None and limit is not None and before + int(declared) > limit:
                refusal = self._over_total(before + int(declared))
        started = False
        received = 0

        async def counted() -> Message:
            nonlocal refusal, received
            message = await receive()
            if message["type"] == "http.request" and message.get("body"):
                received += len(message["body"])
                total = self._count(key, len(message["body"]))
                if before is not None:
                    self.uploading += len(message["body"])
                if received > self.max_request:
                    refusal = self._over_request(received)
                elif total > self.max_session:
                    refusal = self._over_session(total)
                elif before is not None and limit is not None and before + received > limit:
                    refusal = self._over_total(before + received)
                if refusal is not None:
                    raise BodyTooLarge(refusal)
            return message

        async def answer(message: Message) -> None:
            nonlocal started
            if refusal is not None and not started:
                return  # the app's reaction to a cut-off body is replaced by the 413 below
            if message["type"] == "http.response.start":
                started = True
                if issue is not None:
                    self._count(issue, 0)
                    MutableHeaders(scope=message).append(
                        "set-cookie", f"{self.cookie}={issue}; Path=/; HttpOnly; SameSite=Strict"
                    )
            await send(message)

        try:
            if refusal is None:
                try:
                    await self.app(scope, counted, answer)
                except Exception:
                    if refusal is None or started:
                        raise
            if refusal is not None and not started:
                await _too_large(send, refusal)
        finally:
            if before is not None:  # its bytes are on disk now (or gone): in_use counts them
                self.uploading -= received


async def _too_large(send: Send, message: str) -> None:
    body = message.encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
