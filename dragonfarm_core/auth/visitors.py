"""Who a Space's visitor is: a long-lived random cookie per browser, and its runs are theirs.

A Space has no login, yet one visitor must not list, open, use or delete another's runs. Gradio's
own per-visitor id (`session_hash`) is made anew by every page load, so a reload would lose
the runs; this cookie survives reloads and restarts of the Space, for a year. The ASGI
middleware below hands a browser that has none a fresh random id with its first answer (the
page itself, before any handler runs), and the app keeps each visitor's runs in
`<runs>/visitors/<id>/` (ui.per_user binds each handler to it, as it binds a lab
user's). The id is 128 random bits: knowing it is owning the runs, and nothing on a page
shows another visitor's.

Two cookies, as Gradio sets its login's: `SameSite=None; Secure` for the Space's page, which
huggingface.co shows in a frame (another site), and a `SameSite=Lax` one for a plain-http
address (a self-hosted copy, a test), where a Secure cookie is never sent back. A browser that
keeps neither (third-party cookies blocked) is a visitor per page load, named after the page's
Gradio session hash (`page_visitor`): its runs last while the page is open and nobody else sees
them. Pure Starlette.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dragonfarm_core.auth.session_owners import OWNER, session_hash_of

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


def page_visitor(session_hash: str) -> str:
    """The visitor id of a page without the cookie: derived from its Gradio session hash, so
    it lasts as long as the page and shares nothing with a cookie's id."""
    return hashlib.sha256(f"dragonfarm-page:{session_hash}".encode()).hexdigest()[:32]


def owner_of(cookie_header: str | None, session_hash: str | None) -> str | None:
    """Whose runs a request works on: the cookie's visitor, else its page's, else nobody's."""
    return visitor_of(cookie_header) or (page_visitor(session_hash) if session_hash else None)


def _set_cookies(visitor: str) -> list[tuple[bytes, bytes]]:
    common = f"{visitor}; Max-Age={LIFETIME_S}; Path=/; HttpOnly"
    return [
        (b"set-cookie", f"{COOKIES[0]}={common}; SameSite=None; Secure".encode()),
        (b"set-cookie", f"{COOKIES[1]}={common}; SameSite=Lax".encode()),
    ]


class VisitorCookie:
    """Names the request's visitor for session_owners (OWNER), and hands a browser without
    the cookie a new id with the answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cookie = Headers(scope=scope).get("cookie")
        owner = owner_of(cookie, session_hash_of(scope))
        scope = {**scope, OWNER: owner} if owner else scope
        if visitor_of(cookie) is not None:
            await self.app(scope, receive, send)
            return
        fresh = _set_cookies(secrets.token_hex(16))

        async def with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *fresh]}
            await send(message)

        await self.app(scope, receive, with_cookie)
