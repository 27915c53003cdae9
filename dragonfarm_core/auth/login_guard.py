"""Login in front of every route of the lab app: no page, API, file or queue route answers a
caller who is not logged in.

Gradio's own auth (`launch(auth=...)`) checks most routes, but leaves some open (FastAPI's
/openapi.json, /monitoring/{key}, static files), and its login page embeds the whole API
description. So this ASGI middleware decides first: a logged-out caller gets this module's own
small login page at `/`, may POST /login (Gradio's, which checks the password and hands out
the session cookie) and POST /logout; anything else is a 401. Around /login it throttles wrong
passwords (dragonfarm_core.auth.login_throttle) and gives the session cookies a Max-Age of the
session's length, so a browser forgets them when the server does. /logout takes only a POST
(which the Origin check guards, so another site cannot log you out), passed on to Gradio's
route as the GET it expects. It also ends sessions: Gradio keeps its session
tokens in `app.tokens` for as long as the app runs, so the first request replaces that dict
with `ExpiringTokens`, which forgets a token `session_s` after login and a user removed from
the users file at once. With `user_header`, the user is the reverse proxy's header instead and
nothing is public. Pure Starlette: Gradio's App is reached only as `scope["app"]`, by the two
attributes its routes use (`tokens`, `cookie_id`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.middleware import Middleware
from starlette.requests import Request, cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dragonfarm_core.auth import users
from dragonfarm_core.auth.http_guard import refuse
from dragonfarm_core.auth.login_page import LOGIN_PAGE
from dragonfarm_core.auth.login_throttle import LoginThrottle
from dragonfarm_core.auth.profiles import Profile
from dragonfarm_core.auth.session_owners import OWNER

LOGIN_PATHS = frozenset({"/login", "/login/"})
LOGOUT_PATHS = frozenset({"/logout", "/logout/"})
# Gradio's launch() GETs this from its own server, without a login, before it returns; it runs
# the app's start-up events once (already run by then) and answers true or false.
STARTUP_PATH = "/gradio_api/startup-events"
MAX_LOGIN_BODY = 16 * 1024  # a user name and a password, form-encoded


class ExpiringTokens(dict[str, str]):
    """Gradio's token -> user table, where a token lasts `lifetime_s` (None: for ever) and
    only while `still_user(name)` holds. Gradio reads it with `get`, `in` and `[]`."""

    def __init__(
        self, lifetime_s: float | None, still_user: Callable[[str], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        super().__init__()
        self.lifetime_s, self.still_user, self.clock = lifetime_s, still_user, clock
        self.issued: dict[str, float] = {}

    def __setitem__(self, token: str, user: str) -> None:
        super().__setitem__(token, user)
        self.issued[token] = self.clock()

    def _valid(self, token: Any) -> bool:
        if not dict.__contains__(self, token):
            return False
        age = self.clock() - self.issued.get(token, -math.inf)
        if (self.lifetime_s is None or age <= self.lifetime_s) and self.still_user(self[token]):
            return True
        self.pop(token)
        return False

    def __contains__(self, token: object) -> bool:
        return self._valid(token)

    def get(self, token: Any, default: Any = None) -> Any:
        return dict.get(self, token) if self._valid(token) else default

    def pop(self, token: Any, *default: Any) -> Any:
        self.issued.pop(token, None)
        return super().pop(token, *default)

    def __delitem__(self, token: str) -> None:
        self.issued.pop(token, None)
        super().__delitem__(token)


def header_user(headers: Mapping[str, str], header: str) -> str | None:
    """The user a reverse proxy names in `header`, if it is a valid user name."""
    name = str(headers.get(header, "")).strip()
    return name if users.NAME_RE.fullmatch(name) else None


def _path(scope: Scope) -> str:
    """The request's path inside the app (without a proxy's root_path prefix)."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    return (path[len(root) :] or "/") if root and path.startswith(root) else path


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None when it is longer than `limit`."""
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
        if len(body) > limit:
            return None
    return body


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives `body` once, then what the connection sends (a disconnect)."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again


class LoginGuard:
    """Lets through a logged-in caller (Gradio's session cookie, or `user_header`); answers a
    logged-out one with the login page, the throttled /login, or a 401."""

    def __init__(
        self, app: ASGIApp, users_file: str, user_header: str | None = None,
        session_s: float | None = None, throttle: LoginThrottle | None = None,
    ) -> None:  # fmt: skip
        self.app, self.users_file, self.session_s = app, users_file, session_s
        self.user_header = user_header.lower() if user_header else None
        self.throttle = throttle or LoginThrottle()
        self.page = LOGIN_PAGE.encode()

    def _still_user(self, name: str) -> bool:
        return users.exists(self.users_file, name)

    def _session_user(self, scope: Scope) -> str | None:
        """The user of the request's Gradio session cookie, while the session lasts."""
        gradio_app = scope.get("app")
        tokens = getattr(gradio_app, "tokens", None)
        if not isinstance(tokens, ExpiringTokens):
            # Gradio's own dict, made when the app was created: replaced before any login.
            tokens = ExpiringTokens(self.session_s, self._still_user)
            gradio_app.tokens = tokens  # type: ignore[union-attr]
        cookie_id = getattr(gradio_app, "cookie_id", "")
        cookies = cookie_parser(Headers(scope=scope).get("cookie", ""))
        for name in (f"access-token-{cookie_id}", f"access-token-unsecure-{cookie_id}"):
            if (user := tokens.get(cookies.get(name))) is not None:
                return str(user)
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or _path(scope) == STARTUP_PATH:
            await self.app(scope, receive, send)
            return
        if self.user_header:
            await self._by_header(scope, receive, send)
            return
        path, method = _path(scope), scope.get("method", "GET")
        if path in LOGIN_PATHS and method == "POST":
            await self._login(scope, receive, send)
        elif path in LOGOUT_PATHS and scope["type"] == "http":
            await self._logout(scope, receive, send)
        elif (user := self._session_user(scope)) is not None:
            await self.app({**scope, OWNER: user}, receive, send)  # see session_owners
        elif path == "/" and scope["type"] == "http" and method in ("GET", "HEAD"):
            await self._login_page(send, method == "HEAD")
        else:
            await refuse(scope, send, 401, "Log in first: open the app's page (/) in a "
                         "browser, or POST a username and password to /login.",
                         "not_logged_in")  # fmt: skip

    async def _by_header(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (user := header_user(Headers(scope=scope), self.user_header or "")) is not None:
            await self.app({**scope, OWNER: user}, receive, send)
            return
        await refuse(scope, send, 401, f"This app takes its user from the {self.user_header!r} "
                     "header that the login proxy in front of it sets; this request has none "
                     "(or not a valid user name). Open the app through the proxy.",
                     "not_logged_in")  # fmt: skip

    async def _login(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Gradio's /login, unless the name or the address is locked; its answer counts."""
        body = await _read_body(receive, MAX_LOGIN_BODY)
        if body is None:
            await refuse(scope, send, 413, "A login sends a username and a password only.",
                         "login_too_large")  # fmt: skip
            return
        try:
            form = await Request(scope, _replay(body, receive)).form(max_files=0, max_fields=8)
        except (HTTPException, MultiPartException, ValueError):  # Starlette wraps a bad part
            await refuse(scope, send, 400, "Send the username and password as a form.",
                         "login_not_a_form")  # fmt: skip
            return
        name = str(form.get("username") or "").strip()
        address = (scope.get("client") or (None,))[0]
        if (wait := math.ceil(self.throttle.begin(name, address))) > 0:
            await refuse(scope, send, 429, f"Too many wrong passwords for this user name or "
                         f"from this address: try again in {wait} s.", "login_throttled",
                         [(b"retry-after", str(wait).encode())])  # fmt: skip
            return
        status = 0

        async def watched(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": self._lasting(message.get("headers", []))}
            await send(message)

        outcome = None
        try:
            await self.app(scope, _replay(body, receive), watched)
            outcome = True if status == 200 else False if 400 <= status < 500 else None
        finally:
            self.throttle.end(name, address, outcome)

    def _lasting(self, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """`headers` with Max-Age on each session cookie Gradio sets (it sets none, so a
        browser would keep them past the session's end, or for ever when it restores tabs)."""
        if self.session_s is None:
            return headers
        age = f"; Max-Age={int(self.session_s)}".encode()
        return [(k, v + age if k.lower() == b"set-cookie" and v.startswith(b"access-token")
                 else v) for k, v in headers]  # fmt: skip

    async def _logout(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Gradio's GET /logout, reached only by a POST (the Origin check has passed it)."""
        if scope.get("method") != "POST":
            await refuse(scope, send, 405, "Log out with a POST to /logout (the Log out button "
                         "at the top of the app): a link or an image on another site could "
                         "otherwise log you out.", "logout_needs_post",
                         [(b"allow", b"POST")])  # fmt: skip
            return
        await self.app({**scope, "method": "GET"}, receive, send)

    async def _login_page(self, send: Send, head: bool) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/html; charset=utf-8"),
            (b"content-length", str(len(self.page)).encode()),
            (b"cache-control", b"no-store"),
        ]})  # fmt: skip
        await send({"type": "http.response.body", "body": b"" if head else self.page})


def launch_options(profile: Profile) -> tuple[dict[str, Any], Middleware]:
    """For a profile with login on: Gradio's `launch()` arguments (`auth`, or
    `auth_dependency` with a user header) and the LoginGuard in front of the routes. Refuses a
    users file with nobody in it (no one could log in)."""
    users_file = profile.users_file or ""
    guard = Middleware(LoginGuard, users_file=users_file, user_header=profile.user_header,
                       session_s=profile.session_hours and profile.session_hours * 3600)  # fmt: skip
    if profile.user_header:
        header = profile.user_header
        return {"auth_dependency": lambda request: header_user(request.headers, header)}, guard
    users.decoy()  # made now, so the first unknown name costs no more than a wrong password
    if not users.list_users(users_file):
        raise ValueError(
            f"Nobody can log in: {users_file} has no users. Add one with `dragonfarm users "
            f"add NAME --admin --lab-root {profile.lab_root}` (it asks for the password)."
        )

    async def check(name: str, password: str) -> bool:
        # scrypt takes tens of milliseconds: off the event loop, which serves everyone else.
        return await asyncio.to_thread(users.verify, users_file, name, password)

    return {"auth": check}, guard
