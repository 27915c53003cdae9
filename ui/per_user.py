"""Whose runs a request sees: in the lab each user has a runs folder, on a Space each visitor.

Tabs bind their runs folder when the page is built (`partial(show, runs_dir=ctx.runs_dir)`),
before anyone has logged in. So in a login profile the folder they bind is NO_USER, a path in
/proc that does not exist and cannot be created (reads find nothing, writes fail), and
`install` wraps every event handler of the app: per call it takes the user from the request
(Gradio's login, the reverse proxy's header when the profile trusts one, or on a Space the
visitor cookie of dragonfarm_core.auth.visitors) and replaces each
NO_USER path bound in the handler's partials (and each path under it, such as the uploads
folder) with that user's folder. A lambda that reads `ctx.runs_dir` when called gets the same
folder (`AppContext.runs_dir` asks `runs_dir_now`).
A call without a user is refused before the handler runs. Binding happens per call and never
after it, so a background thread a handler starts keeps the folder it was given.

Without owners (local) nothing is wrapped and the folder is the app's own.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gradio as gr
from gradio.context import LocalContext

from dragonfarm_core.auth import session_owners, visitors
from dragonfarm_core.auth.profiles import USERS_DIR, Profile, keep_private
from dragonfarm_core.rundir.files import UPLOADS_DIR

# What a login profile's handlers bind at build time; never a folder anyone's runs are in.
# /proc (Linux, where the lab profile runs) refuses new entries even to root.
NO_USER = Path("/proc/dragonfarm-no-user")
LOGIN_FIRST = "Log in first: in this deployment every action needs a logged-in user."
NO_VISITOR = (
    "This browser sent no visitor cookie, which says whose runs are yours on this Space: "
    "allow cookies for this site and reload the page."
)


def owned(profile: Profile) -> bool:
    """Whether each user (lab) or visitor (a Space) has their own runs folder."""
    return profile.owners_root is not None


def served_root(runs_dir: str | os.PathLike[str], profile: Profile) -> Path:
    """The folder the app keeps runs under and never serves: `runs_dir` (made, with its
    uploads folder), or with login the lab root that holds every user's folder (made private
    to the server's account, see `profiles.keep_private`)."""
    if profile.login:
        root = Path(profile.lab_root or runs_dir).expanduser().resolve()
        root.mkdir(parents=True, exist_ok=True)
        keep_private(root)  # 0700/0600, for this process and its children too
        return root
    folder = Path(runs_dir).expanduser().resolve()
    (folder / UPLOADS_DIR).mkdir(parents=True, exist_ok=True)
    return folder


def request_user(profile: Profile, request: gr.Request | None = None) -> str | None:
    """The logged-in user of `request` (else the request of the handler running now), or None."""
    request = request if request is not None else LocalContext.request.get(None)
    if request is None:
        return None
    if profile.visitors:  # the browser's cookie, else (cookies blocked) the page's session
        headers = getattr(request, "headers", None) or {}
        return visitors.owner_of(headers.get("cookie"), getattr(request, "session_hash", None))
    if profile.user_header:
        # The proxy's authenticated user; the login middleware refuses a request without it.
        headers = getattr(request, "headers", None) or {}
        return str(headers.get(profile.user_header) or "").strip() or None
    return getattr(request, "username", None) or None


def user_dir(profile: Profile, user: str) -> Path:
    """The user's runs folder (made, with its uploads folder, on first use)."""
    folder = Path(profile.runs_dir_for_user(user)).resolve()
    (folder / UPLOADS_DIR).mkdir(parents=True, exist_ok=True)
    return folder


def runs_dir_now(profile: Profile, home: Path) -> Path:
    """The runs folder of the request being handled: `home` without owners; else the user's
    (visitor's) folder, or NO_USER outside a request (building the page) or without one."""
    if not owned(profile):
        return home
    user = request_user(profile)
    return user_dir(profile, user) if user else NO_USER


def foreign_folder(profile: Profile, text: str, runs_dir: Path) -> str | None:
    """Why a local folder the page names (a model to train) may not be used: it lies in the
    lab but outside the caller's own folder (another user's runs or merged models). None when
    it may, or when the text names no existing path (a Hub id). On a Space the app's whole
    runs folder counts as the lab's."""
    if not owned(profile) or not text.strip():
        return None
    shared = Path(profile.lab_root or Path(profile.owners_root or "").parent).resolve()
    try:
        path = Path(text.strip()).expanduser().resolve()
        exists = path.exists()
    except (OSError, RuntimeError, ValueError):
        return None
    inside = path.is_relative_to(shared)
    if not exists or not inside or path.is_relative_to(runs_dir.resolve()):
        return None
    where = "the lab's folder" if profile.lab_root else "this Space's runs folder"
    return (
        f"Refused {text.strip()!r}: it is in {where} but outside your own runs "
        f"directory {runs_dir}; use a model from the Hub, a folder of your own, or ask its "
        f"owner to share it outside {where}."
    )


def rebind(value: Any, folder: Path) -> Any:
    """`value` with NO_USER, and paths under it, replaced by `folder`, inside partials too."""
    if isinstance(value, functools.partial):
        args = [rebind(a, folder) for a in value.args]
        keywords = {k: rebind(v, folder) for k, v in value.keywords.items()}
        return functools.partial(rebind(value.func, folder), *args, **keywords)
    if isinstance(value, Path) and value.is_relative_to(NO_USER):
        return folder / value.relative_to(NO_USER)
    return value


def _for_caller(fn: Callable[..., Any], profile: Profile, args: Any) -> Callable[..., Any]:
    request = LocalContext.request.get(None)
    user = request_user(profile, request)
    if not user:
        raise gr.Error(NO_VISITOR if profile.visitors else LOGIN_FIRST)
    # The page session (its state) and the uploads it names must be this caller's own.
    session = getattr(request, "session_hash", None)
    if refusal := session_owners.call_refusal(session, user, args):
        raise gr.Error(refusal)
    return rebind(fn, user_dir(profile, user))


def per_request(fn: Callable[..., Any], profile: Profile) -> Callable[..., Any]:
    """`fn` bound, at each call, to the calling user's folder; same signature, and a generator
    function stays one (Gradio streams by what the function is, read at call time)."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def stream(*args: Any, **kwargs: Any) -> Any:
            yield from _for_caller(fn, profile, args)(*args, **kwargs)

        return stream
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(f"{fn!r}: per-user handlers must be plain functions or generators.")

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        return _for_caller(fn, profile, args)(*args, **kwargs)

    return call


def install(app: gr.Blocks, profile: Profile) -> None:
    """Wrap every event handler of `app` (see the module docstring); nothing without owners."""
    if not owned(profile):
        return
    for block_fn in app.fns.values():
        if block_fn.fn is not None:
            block_fn.fn = per_request(block_fn.fn, profile)


def all_users_runs(profile: Profile) -> Any:
    """For an admin, every user's runs in one table (read-only: acting on a run stays with its
    user); for anyone else the table stays hidden and empty."""
    viewer = request_user(profile)
    if not profile.login or not profile.lab_root or not profile.is_admin(viewer):
        return gr.update(value=None, visible=False)
    import pandas as pd

    import dragonfarm_core as dragon

    users_root = Path(profile.lab_root) / USERS_DIR
    tables = [
        dragon.runs(folder).assign(user=folder.name)
        for folder in sorted(users_root.iterdir())
        if folder.is_dir()
    ] if users_root.is_dir() else []  # fmt: skip
    listed = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=["user"])
    return gr.update(value=listed[["user", *[c for c in listed.columns if c != "user"]]],
                     visible=True)  # fmt: skip
