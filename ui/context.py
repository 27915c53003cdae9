"""What the tabs share, passed to each tab's `build(ctx)` explicitly.

Tabs never import each other. The few things they share are here: where runs live (per request:
in the lab the logged-in user's folder, on a Space the visitor's, see `ui.per_user`), the
deployment profile (policy the core defines in `dragonfarm_core.auth.profiles`), and four pieces of
per-browser-session state (the loaded dataset, the mapped dataset, the chosen model and the
selected run). A tab reads a state by listing it as
an input and writes it by listing it as an output; each state has one writer, so changes never
bounce between tabs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.auth.profiles import Profile
from dragonfarm_core.rundir.files import UPLOADS_DIR
from ui import per_user


def report_tokenizer(model: dragon.ResolvedModel) -> str | None:
    """The model folder when it has a tokenizer.json (exact token counts in data reports), else
    None (the report estimates tokens from characters)."""
    return model.base if (Path(model.base) / "tokenizer.json").is_file() else None


@dataclass(frozen=True)
class AppContext:
    """Plain values plus the shared `gr.State`s; create it inside `gr.Blocks` with `new_context`."""

    home: Path  # the app's runs folder; with owners only NO_USER (each has their own)
    profile: Profile
    dataset: gr.State  # dragon.Dataset as loaded, or None. Written by the Data tab.
    mapped: gr.State  # dragon.Dataset with a mapping, or None. Written by the Mapping tab.
    model: gr.State  # ResolvedModel chosen for training and previews. Written by the Model tab.
    run: gr.State  # the selected run's directory (str), or None.
    tabs: gr.Tabs | None = None  # the app's tabs, so a handler can move the user on to one
    # (fn, outputs) to run when a page loads: with login, what the page shows of the user's own
    # runs (the build-time values are empty); build_app wires them to the app's load event.
    loads: list[tuple[Callable[[], Any], list[Any]]] = field(default_factory=list)

    @property
    def runs_dir(self) -> Path:
        """Where runs live for the request being handled (build time: `home`, or NO_USER
        with login). A handler bound to it at build time gets the caller's own folder."""
        return per_user.runs_dir_now(self.profile, self.home)

    def on_load(self, fn: Callable[[], Any], outputs: list[Any]) -> None:
        """Run `fn` (no inputs) when a page loads, only where each user (or visitor) has
        their own runs; otherwise the build-time values are already right."""
        if per_user.owned(self.profile):
            self.loads.append((fn, outputs))

    @property
    def uploads_dir(self) -> Path:
        return self.runs_dir / UPLOADS_DIR


def new_context(runs_dir: Path, profile: Profile) -> AppContext:
    """The context for one app; must be called inside a `gr.Blocks` block. With owners (lab
    users, Space visitors) the tabs are built against NO_USER, never a folder with runs in it."""
    return AppContext(
        home=per_user.NO_USER if per_user.owned(profile) else runs_dir,
        profile=profile,
        dataset=gr.State(None),
        mapped=gr.State(None),
        # Not validated here: the app starts even before the bundled weights are built, and
        # the Model tab validates a choice when asked to.
        model=gr.State(dragon.ResolvedModel.bundled()),
        run=gr.State(None),
    )
