"""Who may talk to dragonfarm's two web servers: the Gradio app and `dragonfarm serve`.

Both bind to 127.0.0.1 by default, but a browser will still carry a foreign page's requests to
them: a page whose own name resolves to 127.0.0.1 (DNS rebinding) sends `Host: evil.example`,
and any page can POST to http://127.0.0.1:PORT (a "simple" request needs no CORS preflight).
So each server answers only to the host names it is meant to be reached by, and takes a
state-changing request only when it has no Origin (curl, the openai client, Python) or comes
from one of those names. The names: 127.0.0.1, localhost, [::1], the `--host` it binds to, and
whatever `--allowed-hosts` / DRAGONFARM_ALLOWED_HOSTS add (for a reverse proxy or another
machine); any port. The Host check is Starlette's TrustedHostMiddleware; the Origin check is
the small `OriginGuard` below (Starlette has none). Pure Starlette: no gradio import, so
`dragonfarm serve` uses it too.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

ALLOWED_HOSTS_ENV = "DRAGONFARM_ALLOWED_HOSTS"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
# Binding to these means "every interface": no one name to add, so only the listed ones count.
ANY_INTERFACE = frozenset({"", "0.0.0.0", "::", "[::]"})
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
ALLOWED_HOSTS_HELP = (
    "comma-separated host names to answer to besides 127.0.0.1, localhost and --host (a "
    "reverse proxy's name, this machine's LAN name, *.example.com; any port); also "
    f"read from {ALLOWED_HOSTS_ENV}"
)

# uvicorn believes X-Forwarded-For and X-Forwarded-Proto from the addresses in this variable
# (its default: loopback), read when a server is made. The app sets it for its own server.
UVICORN_FORWARDED_ENV = "FORWARDED_ALLOW_IPS"
FORWARDED_ALLOW_IPS_HELP = (
    "comma-separated addresses or networks of the reverse proxy in front of the app, whose "
    "X-Forwarded-For (the client's address) is believed; default: none, so the address a "
    "login is counted against is always the connection's own"
)


def forwarded_ips(value: str | Iterable[str] | None) -> str:
    """`--forwarded-allow-ips` as uvicorn reads it: "" (believe no one), or checked IP
    addresses and networks (and `*`, any address), comma-separated."""
    entries = split_hosts(value)
    for entry in entries:
        try:
            if entry != "*":
                ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ValueError(
                f"{entry!r} is not an address: give the proxy's IP addresses or networks "
                "(127.0.0.1, 10.0.0.0/8), comma-separated, to --forwarded-allow-ips."
            ) from None
    return ",".join(entries)


@contextmanager
def forwarded_from(value: str | Iterable[str] | None) -> Iterator[None]:
    """While a uvicorn server is made: believe forwarded headers only from `value`'s
    addresses (none by default), whatever the environment said."""
    before = os.environ.get(UVICORN_FORWARDED_ENV)
    os.environ[UVICORN_FORWARDED_ENV] = forwarded_ips(value)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(UVICORN_FORWARDED_ENV, None)
        else:
            os.environ[UVICORN_FORWARDED_ENV] = before


def host_pattern(entry: str) -> str:
    """One `--allowed-hosts` entry as TrustedHostMiddleware matches it: a lower-case name or
    IP (IPv6 in brackets, as a Host header writes it), `*.example.com`, or `*` (any)."""
    name = entry.strip().lower()
    if name == "*" or (name.startswith("*.") and "*" not in name[2:] and len(name) > 2):
        return name
    try:
        address = ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        address = None
    if address is not None:
        return f"[{address}]" if address.version == 6 else str(address)
    if not name or "*" in name or any(c in name for c in ":/@ \t[]?#"):
        raise ValueError(
            f"{entry!r} is not a host name: give names such as lab.example.com, 10.0.0.5 or "
            "*.example.com, comma-separated, without scheme or port (any port is accepted)."
        )
    return name


def split_hosts(value: str | Iterable[str] | None) -> list[str]:
    """Names from a comma list (the flag and the variable) or from a list of such lists."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    return [name.strip() for item in items for name in item.split(",") if name.strip()]


def allowed_hosts(bound: str | None = None, extra: str | Iterable[str] | None = None) -> list[str]:
    """The host names a server answers to: loopback, the interface it binds to (unless that
    is every interface), `extra` (comma lists or names) and DRAGONFARM_ALLOWED_HOSTS."""
    entries: list[str] = list(LOOPBACK_HOSTS)
    if bound is not None and bound.strip().lower() not in ANY_INTERFACE:
        entries.append(bound)
    entries += split_hosts(extra) + split_hosts(os.environ.get(ALLOWED_HOSTS_ENV))
    patterns: list[str] = []
    for entry in entries:
        if (pattern := host_pattern(entry)) not in patterns:
            patterns.append(pattern)
    return patterns


def host_matches(host: str, patterns: Sequence[str]) -> bool:
    """TrustedHostMiddleware's rule: the exact name, a `*.suffix` pattern, or `*`."""
    return any(
        p == "*" or host == p or (p.startswith("*.") and host.endswith(p[1:])) for p in patterns
    )


def origin_allowed(origin: str, patterns: Sequence[str]) -> bool:
    """An http(s) Origin whose host is one of the allowed names (any port). "null" is not."""
    try:
        parts = urlsplit(origin.strip())
        name = parts.hostname
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not name:
        return False
    return host_matches(f"[{name}]" if ":" in name else name, patterns)


def _named(value: str | None) -> str:
    """A header value for an error message: quoted, escaped, never very long."""
    return json.dumps((value or "")[:200])


def _how_to_allow(value: str | None, origin: bool = False) -> str:
    """The flag and variable that would allow this Host header's (or Origin's) name."""
    try:
        name = urlsplit((value or "") if origin else f"//{value or ''}").hostname
        name = host_pattern(name) if name else "NAME"
    except ValueError:
        name = "NAME"
    return f"start it with --allowed-hosts {name} (or set {ALLOWED_HOSTS_ENV}={name})"


async def refuse(
    scope: Scope, send: Send, status: int, message: str, code: str,
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:  # fmt: skip
    """An error in OpenAI's shape (which both servers' clients read); a websocket is closed."""
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
        return
    body = json.dumps(
        {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": code,
            }
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class HostGuard:
    """TrustedHostMiddleware deciding, with an answer that says which host was refused and
    how to allow it (its own is a bare "Invalid host header")."""

    def __init__(self, app: ASGIApp, allowed_hosts: Sequence[str]) -> None:
        self.app = app
        self.allowed_hosts = list(allowed_hosts)
        self.trusted = TrustedHostMiddleware(self._passed, self.allowed_hosts, www_redirect=False)

    async def _passed(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, scope["dragonfarm.send"])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        scope["dragonfarm.send"] = send
        refused = False

        async def refusal(message: Message) -> None:
            # Only TrustedHostMiddleware's own refusal arrives here (a passed request goes
            # to the app with the real `send`): answer it with the clear message instead.
            nonlocal refused
            if refused:
                return
            refused = True
            host = Headers(scope=scope).get("host")
            await refuse(
                scope,
                send,
                400,
                f"This server does not answer to the host {_named(host)} (the request's Host "
                f"header); it answers to {', '.join(self.allowed_hosts)}. A page from another "
                "site can reach a local server under its own name (DNS rebinding), so other "
                f"names are refused. If you reach this server by that name on purpose (a "
                f"reverse proxy, another machine), {_how_to_allow(host)}.",
                "host_not_allowed",
            )

        await self.trusted(scope, receive, refusal)


class OriginGuard:
    """Refuses a state-changing request (and a websocket) sent by a page of another origin.

    Browsers send Origin with every cross-origin POST, so a foreign page's form or fetch is
    refused here; requests without Origin (curl, SDKs, same-origin GETs) pass.
    """

    def __init__(self, app: ASGIApp, allowed_hosts: Sequence[str]) -> None:
        self.app = app
        self.allowed_hosts = list(allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        checked = scope["type"] == "websocket" or (
            scope["type"] == "http" and scope["method"] in STATE_CHANGING
        )
        origin = Headers(scope=scope).get("origin") if checked else None
        if origin is None or origin_allowed(origin, self.allowed_hosts):
            await self.app(scope, receive, send)
            return
        what = "a websocket" if scope["type"] == "websocket" else f"a {scope['method']} request"
        await refuse(
            scope,
            send,
            403,
            f"Refused {what} from the page at {_named(origin)}: this server takes changes "
            f"only from its own pages ({', '.join(self.allowed_hosts)}), so another site "
            f"cannot drive it from your browser. If you trust that origin, "
            f"{_how_to_allow(origin, origin=True)}.",
            "origin_not_allowed",
        )


def guard_middleware(hosts: Sequence[str]) -> list[Middleware]:
    """The Host check, then the Origin check, for a Starlette/FastAPI app's `middleware=`."""
    return [
        Middleware(HostGuard, allowed_hosts=list(hosts)),
        Middleware(OriginGuard, allowed_hosts=list(hosts)),
    ]


def describe(hosts: Sequence[str]) -> str:
    """One line for a server's start-up output."""
    return f"Answers to the host names {', '.join(hosts)} (add others with --allowed-hosts)."
