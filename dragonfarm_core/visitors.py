"""Who a Space's visitor is: a long-lived random cookie per browser, and its runs are theirs.

A Space has no login, yet one visitor must not list, open, use or delete another's runs. Gradio's
own per-visitor id (`session_hash`) is made anew by every page load, so a reload would lose
the runs; this cookie survives reloads and restarts of the Space, for a year. The ASGI
middleware below gives a browser that has none a fresh random id before the app sees the
request (so the page load that hands it out already has it), and the app keeps each visitor's
runs in `<runs>/visitors/<id>/` (ui.per_user binds each handler to it, as it binds a lab
user's). The id is 128 random bits: knowing it is owning the runs, and nothing on a page
shows another visitor's.

Two cookies, as Gradio sets its login's: `SameSite=None; Secure` for the Space's page, which
huggingface.co shows in a frame (another site), and a `SameSite=Lax` one for a plain-http
address (a self-hosted copy, a test), where a Secure cookie is never sent back. A browser that
keeps neither (third-party cookies blocked) gets a new id per page load: its runs last while
the page is open and nobody else sees them. Pure Starlette.
"""

from __future__ import annotations

import re
import secrets

from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dragonfarm_core.session_owners import OWNER

COOKIE = "dragonfarm-visitor"
COOKIES = (COOKIE, f"{COOKIE}-unsecure")
VISITORS_DIR = "visitors"  # <runs>/visitors/<id>/ is a visitor's runs dir
LIFETIME_S = 400 * 24 * 3600  # the longest Max-Age a browser keeps (Chrome caps it here)
ID_RE = re.compile(r"[0-9a-f]{32}")


def visitor_of(cookie_header: str | None) -> str | None:
    """The visitor id a request's Cookie header carries, if it is a well-formed one."""
    cookies = cookie_parser(cookie_header or "")
    for name in COOKIES:
        if ID_RE.fullmatch(value := cookies.get(name, "")):
            return value
    return None


def _set_cookies(visitor: str) -> list[tuple[bytes, bytes]]:
    common = f"{visitor}; Max-Age={LIFETIME_S}; Path=/; HttpOnly"
    return [
        (b"set-cookie", f"{COOKIES[0]}={common}; SameSite=None; Secure".encode()),
        (b"set-cookie", f"{COOKIES[1]}={common}; SameSite=Lax".encode()),
    ]


class VisitorCookie:
    """Hands a browser without a visitor cookie a new id, seen by this request already."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        cookie = Headers(scope=scope).get("cookie")
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if (known := visitor_of(cookie)) is not None:
            await self.app({**scope, OWNER: known}, receive, send)  # see session_owners
            return
        visitor = secrets.token_hex(16)
        merged = f"{cookie}; " if cookie else ""
        headers = [(k, v) for k, v in scope["headers"] if k != b"cookie"]
        headers.append((b"cookie", f"{merged}{COOKIE}={visitor}".encode("latin-1")))

        async def with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []),
                                                  *_set_cookies(visitor)]}  # fmt: skip
            await send(message)

        await self.app({**scope, "headers": headers, OWNER: visitor}, receive, with_cookie)
