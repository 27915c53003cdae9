"""The app's layout: one tab per module in `ui/tabs/`, and `launch()` for app.py and the CLI.

Adding a tab is two lines here: import its module and list it in TABS. A tab module has a
`TITLE` and a `build(ctx)` that creates its widgets and wires its events.

However it is launched (`launch()` here, or `dragon.app(...).launch()` in a notebook), the app
answers only to its own host names, takes changes only from its own pages, caps uploads per
request and per session (dragonfarm_core.auth.http_guard and .upload_caps, installed through
Gradio's `app_kwargs`), and keeps Gradio's uploads in a folder of its own.
"""

from __future__ import annotations

import atexit
import dataclasses
import inspect
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gradio as gr
from starlette.middleware import Middleware

from dragonfarm_core.auth import http_guard, login_guard, upload_disk
from dragonfarm_core.auth.profiles import Profile, get_profile, runs_dir_for
from dragonfarm_core.auth.session_owners import SessionGuard
from dragonfarm_core.auth.upload_caps import UploadCaps
from dragonfarm_core.auth.visitors import VisitorCookie
from ui import per_user, queue_panel
from ui.context import new_context
from ui.tabs import (
    chat,
    compare,
    data,
    evaluate,
    export,
    feedback,
    mapping,
    model,
    monitor,
    pipelines,
    runs,
    train,
)

TABS = (data, mapping, model, train, monitor, evaluate, compare, pipelines, chat, feedback, export,
        runs)  # fmt: skip
THEME = gr.themes.Soft(primary_hue="emerald", neutral_hue="slate")
# The theme's syntax colours in the code panels are pale on white, so the code read as faint:
# darken them, keeping their hues (the panels are read-only, nothing else is drawn there).
# The Monitor's before/after cards (ui.run_outcome): three replies side by side.
CSS = """
.cm-editor .cm-content { filter: brightness(0.55) saturate(1.6); }
.run-outcome .outcome-sentence { font-size: 1.05em; font-weight: 600; }
.run-outcome .outcome-card { border: 1px solid #cbd5e1; border-radius: 6px; padding: 6px 10px;
  margin: 6px 0; }
.run-outcome .outcome-prompt { font-style: italic; margin: 2px 0 6px; }
.run-outcome .outcome-row { display: flex; gap: 12px; }
.run-outcome .outcome-cell { flex: 1 1 0; min-width: 0; }
.run-outcome .outcome-cell p { margin: 2px 0; white-space: pre-wrap; }
"""
HEADER = "## dragonfarm\nData in, columns mapped, model picked, trained, tried, improved."
# A POST, which the Origin check guards (a GET link could be fired by any page); relative, as
# under a proxy's path prefix. Not with a proxy's user header: the proxy logs people out.
LOGOUT_FORM = (
    '<form method="post" action="logout" style="text-align: right">'
    '<button type="submit" class="lg secondary sm">Log out</button></form>'
)
GRADIO_TEMP_ENV = "GRADIO_TEMP_DIR"
TEMP_PREFIX = "dragonfarm-gradio-"
# Gradio's cache is cleared every 10 minutes of the files it made more than an hour ago: an
# upload is copied into the runs folder as soon as the Data tab reads it (upload_disk.py).
CACHE_CLEANING = (600, 3600)
_temp_dir: Path | None = None


def gradio_temp_dir() -> Path:
    """This process's own Gradio cache (uploads and every file the app serves), as
    GRADIO_TEMP_DIR, so the app never serves another app's upload from a shared /tmp/gradio.

    Gradio reads the variable when each component is created, when `launch()` creates its
    server and on every upload it checks, so it is set before the first component and kept
    for the process (two apps in one process share it). Not under the runs folder: that is in
    `blocked_paths`, which would refuse every upload. A GRADIO_TEMP_DIR set by the user is the
    folder this one is made in; the folder is removed when the process exits.
    """
    global _temp_dir
    if _temp_dir is None or not _temp_dir.is_dir():
        chosen = os.environ.get(GRADIO_TEMP_ENV)
        base = Path(chosen) if chosen else Path(tempfile.gettempdir())
        if base.name.startswith(TEMP_PREFIX):  # inherited from a parent app: not a base
            base = base.parent
        base.mkdir(parents=True, exist_ok=True)
        _temp_dir = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=base)).resolve()
        atexit.register(shutil.rmtree, _temp_dir, True)
    os.environ[GRADIO_TEMP_ENV] = str(_temp_dir)
    return _temp_dir


class DragonfarmApp(gr.Blocks):
    """The app's `gr.Blocks`; its `launch()` installs what keeps other sites out."""

    runs_dir: Path
    profile: Profile

    def uploads_in_use(self) -> int:
        """Bytes the app's uploads take: Gradio's cache and every uploads folder of its runs."""
        return upload_disk.disk_in_use([*upload_disk.upload_folders(self.runs_dir),
                                        gradio_temp_dir()])  # fmt: skip

    def hosts(
        self, server_name: str | None, allowed_hosts: str | Sequence[str] | None
    ) -> list[str]:
        """The host names the app answers to when bound to `server_name` (Gradio's default
        when None), with the profile's and `allowed_hosts` added."""
        bound = server_name or os.environ.get("GRADIO_SERVER_NAME") or "127.0.0.1"
        extra = [*self.profile.allowed_hosts, *http_guard.split_hosts(allowed_hosts)]
        return http_guard.allowed_hosts(bound, extra)

    def launch(
        self, *args: Any, allowed_hosts: str | Sequence[str] | None = None,
        forwarded_allow_ips: str | Sequence[str] | None = None, **kwargs: Any,
    ) -> Any:  # fmt: skip
        """`gr.Blocks.launch`, plus `allowed_hosts`: host names to answer to besides
        127.0.0.1, localhost, [::1] and `server_name` (a comma list or names; any port), and
        `forwarded_allow_ips`: the reverse proxy's addresses, whose X-Forwarded-For is
        believed (default none: each client is the address it connects from)."""
        if kwargs.pop("ssr_mode", None) or kwargs.pop("num_workers", None):
            raise ValueError(
                "ssr_mode and num_workers put Gradio's Node server and file workers in front "
                "of the app's host and upload checks; launch without them."
            )
        named = inspect.signature(gr.Blocks.launch).bind_partial(self, *args, **kwargs)
        hosts = self.hosts(named.arguments.get("server_name"), allowed_hosts)
        bound = named.arguments.get("server_name") or os.environ.get("GRADIO_SERVER_NAME")
        if (refusal := self.profile.bind_refusal(bound or "127.0.0.1")) is not None:
            raise ValueError(refusal)
        login: list[Middleware] = []
        if self.profile.login:  # the lab: Gradio's auth, and our guard in front of every route
            if {"auth", "auth_dependency"} & set(named.arguments):
                raise ValueError(f"The {self.profile.name!r} profile sets the login itself; "
                                 "launch without auth or auth_dependency.")  # fmt: skip
            options, guard = login_guard.launch_options(self.profile)
            kwargs.update(options)
            login.append(guard)
        hint = (
            f" (Set by the {self.profile.name!r} profile: max_upload_mb="
            f"{self.profile.max_upload_mb}, max_session_upload_mb="
            f"{self.profile.max_session_upload_mb}, max_total_upload_mb="
            f"{self.profile.max_total_upload_mb}.)"
        )
        app_kwargs = dict(kwargs.pop("app_kwargs", None) or {})
        app_kwargs["middleware"] = [
            *http_guard.guard_middleware(hosts),
            *login,  # after the Origin check (no login from a foreign page), before uploads
            # A Space: each browser's visitor id, before anything that reads whose runs
            *([Middleware(VisitorCookie)] if self.profile.visitors else []),
            Middleware(SessionGuard),  # sessions and uploads are their login's (or visitor's)
            Middleware(
                UploadCaps,
                max_request_mb=self.profile.max_upload_mb,
                max_session_mb=self.profile.max_session_upload_mb,
                hint=hint,
                max_total_mb=self.profile.max_total_upload_mb,
                in_use=self.uploads_in_use,
            ),
            *app_kwargs.get("middleware", []),
        ]
        # The runs folder holds configs, adapters and uploads: never serve it, whatever a
        # component returns (blocked_paths wins over every allowed path).
        blocked = [str(self.runs_dir), *(kwargs.pop("blocked_paths", None) or [])]
        kwargs.setdefault("max_file_size", f"{self.profile.max_upload_mb}mb")
        gradio_temp_dir()
        with http_guard.forwarded_from(forwarded_allow_ips):  # read as Gradio makes uvicorn's
            return super().launch(
                *args,
                app_kwargs=app_kwargs,
                blocked_paths=blocked,
                ssr_mode=False,  # the checks live in this Python server: nothing answers first
                num_workers=0,
                **kwargs,
            )


def where_runs_go(folder: Path, profile: Profile) -> str:
    """The header's line: where runs are saved, the active profile and what it turns off."""
    text = f"Runs are saved in `{folder}` · {profile.summary()}"
    if profile.ephemeral_runs and folder.is_relative_to(Path(profile.default_runs_dir).resolve()):
        text += (
            "\n\n**This Space has no persistent storage: runs vanish when it restarts.** "
            "Turn on persistent storage in the Space's settings to keep them."
        )
    return text


def build_app(runs_dir: str | os.PathLike[str], profile: str | Profile = "local") -> DragonfarmApp:
    """The app as a `gr.Blocks`, keeping its runs (and uploads) in `runs_dir`; `profile` is a
    profile's name or a `Profile` (own upload caps, host names)."""
    chosen = profile if isinstance(profile, Profile) else get_profile(profile, runs_dir)
    folder = per_user.served_root(runs_dir, chosen)
    chosen = chosen.with_runs_dir(folder)  # a Space's visitors: their folders under it
    gradio_temp_dir()  # before any component: each reads GRADIO_TEMP_DIR when created
    with DragonfarmApp(
        title="dragonfarm", analytics_enabled=False, delete_cache=CACHE_CLEANING
    ) as app:
        app.runs_dir, app.profile = folder, chosen  # with login: the lab root, all users'
        ctx = new_context(folder, chosen)
        gr.Markdown(HEADER, elem_id="df-header")
        # With owners the line names the user's own folder, filled in when the page loads.
        shown = gr.Markdown(
            "" if chosen.login else where_runs_go(folder, chosen), elem_id="df-runs-dir"
        )
        ctx.on_load(lambda: where_runs_go(ctx.runs_dir, chosen), [shown])
        if chosen.login and not chosen.user_header:
            gr.HTML(LOGOUT_FORM, elem_id="df-logout")
        with gr.Tabs() as tabs:
            ctx = dataclasses.replace(ctx, tabs=tabs)
            for tab in TABS:
                with gr.Tab(tab.TITLE, id=tab.__name__.rsplit(".", 1)[-1]):
                    tab.build(ctx)
        for fn, outputs in ctx.loads:
            app.load(fn, None, outputs, show_progress="hidden")
    per_user.install(app, chosen)  # with login: every handler gets the caller's own folder
    queue_panel.install(chosen)  # with a per-user cap: every device job this process starts
    return app


def launch(
    runs_dir: str | os.PathLike[str] | None = None,
    host: str | None = None,
    port: int | None = 7860,
    profile: str | None = None,
    allowed_hosts: str | Sequence[str] | None = None,
    forwarded_allow_ips: str | Sequence[str] | None = None,
) -> None:
    """Build the app for the profile and serve it until interrupted."""
    chosen = get_profile(profile, runs_dir)  # the lab's root is --runs-dir, unless its env
    folder = runs_dir_for(runs_dir, chosen)
    server_name = host or chosen.host
    print(f"dragonfarm: runs are saved in {folder}", flush=True)
    app = build_app(folder, chosen)
    print(f"dragonfarm: {http_guard.describe(app.hosts(server_name, allowed_hosts))}", flush=True)
    app.launch(
        server_name=server_name,
        server_port=port,
        allowed_hosts=allowed_hosts,
        forwarded_allow_ips=forwarded_allow_ips,
        theme=THEME,
        css=CSS,
        run_history=False,  # Gradio 6 would otherwise keep every call in the browser
        enable_monitoring=False,
        mcp_server=False,
        footer_links=["api", "settings"],
        show_error=True,
        # Gradio's own start-up lines end with "set `share=True`", an option this app does
        # not have (the host checks would refuse the share tunnel anyway): say where it is.
        quiet=True,
        prevent_thread_lock=True,
    )
    print(f"dragonfarm: open {app.local_url} in a browser (Ctrl+C stops the app)", flush=True)
    app.block_thread()
