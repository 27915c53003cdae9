"""What each login (or Space visitor) owns in Gradio: its session hashes and its uploads.

Gradio keys a page's state (the loaded dataset, the mapping, the chosen run) and its stream of
event results by `session_hash`, a random id the page makes, and serves an uploaded file to
whoever names its cache path. Neither knows about logins: with bob's session hash alice read the
dataset bob had loaded, and with his upload's path she fetched the file. So here the first
owner to use a session hash owns it and any other is refused, and an upload belongs to the
owners that sent it (one file sent by two users is both's): only they may fetch it or hand it
to a handler.

The owner is what the login middleware (a lab user) or the visitor cookie (a Space visitor)
put in the ASGI scope under OWNER; without one (the local profile: one person) nothing is
checked. `SessionGuard` checks the routes that name a session hash or a file and records
what /upload answers; `ui.per_user` checks each handler call (its session hash and the file
paths it is given). In memory, per process: a restart forgets them, as Gradio forgets its
sessions and its upload cache. Pure Starlette.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dragonfarm_core.auth.http_guard import refuse

OWNER = "dragonfarm.owner"  # the scope key the login or visitor middleware sets
MAX_KEYS = 100_000  # the oldest sessions and uploads are forgotten past this many
# Gradio routes that carry a session hash in the path: /heartbeat/<hash>, /stream/<hash>/...
HASH_IN_PATH = ("/gradio_api/heartbeat/", "/gradio_api/stream/")
FILE_ROUTES = ("/gradio_api/file=", "/file=")
UPLOAD_ROUTES = frozenset({"/gradio_api/upload", "/gradio_api/upload/"})
NOT_YOURS = (
    "This page session belongs to another login (or another browser); reload the app to "
    "start a session of your own."
)


class Owners:
    """key -> the owners that may use it; the first claim of a session makes its owner."""

    def __init__(self) -> None:
        self._table: OrderedDict[str, set[str]] = OrderedDict()
        self._lock = threading.Lock()  # the event loop and Gradio's handler threads share it

    def claim(self, key: str, owner: str) -> bool:
        """Whether `owner` may use `key`: it is theirs, or nobody's until now (then theirs)."""
        with self._lock:
            if key not in self._table:
                self._add(key, owner)
            return owner in self._table[key]

    def add(self, key: str, owner: str) -> None:
        with self._lock:
            self._add(key, owner)

    def refuses(self, key: str, owner: str) -> bool:
        """Whether `key` is someone's and not `owner`'s (an unknown key is nobody's)."""
        with self._lock:
            return key in self._table and owner not in self._table[key]

    def _add(self, key: str, owner: str) -> None:
        self._table.setdefault(key, set()).add(owner)
        self._table.move_to_end(key)
        while len(self._table) > MAX_KEYS:
            self._table.popitem(last=False)


sessions = Owners()  # Gradio session hash -> its owner
uploads = Owners()  # an uploaded file's resolved path -> the owners who sent it


def _key(path: str) -> str:
    return os.path.realpath(path)


def foreign_upload(values: Iterable[Any], owner: str) -> str | None:
    """The first of `values` (a handler's arguments, nested lists and dicts too) that names a
    file someone else uploaded, or None."""
    for value in values:
        # Gradio hands a handler an upload as its absolute cache path.
        text = str(value) if isinstance(value, (str, Path)) else ""
        if text.startswith("/") and len(text) < 4096 and uploads.refuses(_key(text), owner):
            return text
        if isinstance(value, (list, tuple)):
            found = foreign_upload(value, owner)
        elif isinstance(value, dict):
            found = foreign_upload(value.values(), owner)
        else:
            found = None
        if found:
            return found
    return None


def call_refusal(session_hash: str | None, owner: str, args: Iterable[Any]) -> str | None:
    """Why `owner` may not call a handler in `session_hash` with `args`, or None."""
    if session_hash and not sessions.claim(session_hash, owner):
        return NOT_YOURS
    if foreign_upload(args, owner):
        return "That file was uploaded by someone else; upload your own copy."
    return None


def _inside(scope: Scope) -> str:
    """The request's path inside the app (without a proxy's root_path prefix)."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def session_hash_of(scope: Scope) -> str | None:
    """The Gradio session hash a request names in its query or path (the body's is read by
    the handler's check, see `call_refusal`)."""
    path = _inside(scope)
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    if hashes := query.get("session_hash"):
        return hashes[0]
    for prefix in HASH_IN_PATH:
        if path.startswith(prefix):
            return path[len(prefix) :].split("/", 1)[0] or None
    return None


def _file_named(path: str) -> str | None:
    for prefix in FILE_ROUTES:
        if path.startswith(prefix):
            return unquote(path[len(prefix) :])
    return None


class SessionGuard:
    """Refuses another owner's session hash (403) and upload (404, as if it were not there),
    and records whose each upload is."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        owner = scope.get(OWNER)
        if scope["type"] != "http" or not owner:
            await self.app(scope, receive, send)
            return
        path = _inside(scope)
        session_hash = session_hash_of(scope)
        if session_hash and not sessions.claim(session_hash, owner):
            await refuse(scope, send, 403, NOT_YOURS, "session_not_yours")
            return
        named = _file_named(path)
        if named and uploads.refuses(_key(named), owner):
            await refuse(scope, send, 404, "No such file.", "file_not_found")
            return
        if path in UPLOAD_ROUTES and scope.get("method") == "POST":
            send = self._recording(send, owner)
        await self.app(scope, receive, send)

    @staticmethod
    def _recording(send: Send, owner: str) -> Send:
        """`send`, noting the paths a successful upload answers with before the last byte."""
        body, status = b"", 0

        async def noting(message: Message) -> None:
            nonlocal body, status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and status == 200:
                body += message.get("body", b"")
                if not message.get("more_body"):
                    _record(body, owner)
            await send(message)

        return noting


def _record(body: bytes, owner: str) -> None:
    try:
        paths = json.loads(body)
    except ValueError:
        return
    for path in paths if isinstance(paths, list) else []:
        if isinstance(path, str):
            uploads.add(_key(path), owner)
