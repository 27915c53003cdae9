"""What the tabs share, passed to each tab's `build(ctx)` explicitly.

Tabs never import each other. The few things they share are here: where runs live, the
deployment profile, and four pieces of per-browser-session state (the loaded dataset, the
mapped dataset, the chosen model and the selected run). A tab reads a state by listing it as
an input and writes it by listing it as an output; each state has one writer, so changes never
bounce between tabs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.rundir.files import UPLOADS_DIR

PROFILE_ENV = "DRAGONFARM_PROFILE"
RUNS_DIR_ENV = "DRAGONFARM_RUNS_DIR"


@dataclass(frozen=True)
class Profile:
    """How the app is deployed: who can reach it and what it accepts."""

    name: str
    host: str  # the interface the server binds to
    max_upload_mb: int  # uploads larger than this are refused (by Gradio and by the Data tab)
    default_runs_dir: str  # used when neither --runs-dir nor DRAGONFARM_RUNS_DIR is given
    # One request's uploads together are capped at max_upload_mb; a browser session's at this.
    max_session_upload_mb: int = 4096
    # Host names the app answers to besides loopback and its --host (see http_guard).
    allowed_hosts: tuple[str, ...] = ()


PROFILES: dict[str, Profile] = {
    "local": Profile("local", "127.0.0.1", 1024, "dragonfarm_runs"),
    # A Space reaches the app through its proxy on 0.0.0.0:7860, under the name in SPACE_HOST
    # (set by Hugging Face); /data is its persistent disk.
    "spaces": Profile(
        "spaces",
        "0.0.0.0",
        200,
        "/data/dragonfarm_runs" if Path("/data").is_dir() else "dragonfarm_runs",
        max_session_upload_mb=1000,
        allowed_hosts=tuple(filter(None, [os.environ.get("SPACE_HOST")])),
    ),
}


def get_profile(name: str | None = None) -> Profile:
    """The named profile, else DRAGONFARM_PROFILE's, else `local`."""
    name = (name or os.environ.get(PROFILE_ENV) or "local").strip().lower()
    if name not in PROFILES:
        if name == "lab":
            raise ValueError(
                "The 'lab' profile (login, per-user runs) is not available in this version; "
                "use --profile local, or put the app behind your own login proxy."
            )
        raise ValueError(f"Unknown profile {name!r}; use one of {', '.join(PROFILES)}.")
    return PROFILES[name]


def app_runs_dir(runs_dir: str | os.PathLike[str] | None, profile: Profile) -> Path:
    """Where the app keeps runs: the argument, else DRAGONFARM_RUNS_DIR, else the profile's."""
    chosen = runs_dir or os.environ.get(RUNS_DIR_ENV) or profile.default_runs_dir
    return Path(chosen).expanduser().resolve()


def report_tokenizer(model: dragon.ResolvedModel) -> str | None:
    """The model folder when it has a tokenizer.json (exact token counts in data reports), else
    None (the report estimates tokens from characters)."""
    return model.base if (Path(model.base) / "tokenizer.json").is_file() else None


@dataclass(frozen=True)
class AppContext:
    """Plain values plus the shared `gr.State`s; create it inside `gr.Blocks` with `new_context`."""

    runs_dir: Path
    profile: Profile
    dataset: gr.State  # dragon.Dataset as loaded, or None. Written by the Data tab.
    mapped: gr.State  # dragon.Dataset with a mapping, or None. Written by the Mapping tab.
    model: gr.State  # ResolvedModel chosen for training and previews. Written by the Model tab.
    run: gr.State  # the selected run's directory (str), or None.
    tabs: gr.Tabs | None = None  # the app's tabs, so a handler can move the user on to one

    @property
    def uploads_dir(self) -> Path:
        return self.runs_dir / UPLOADS_DIR


def new_context(runs_dir: Path, profile: Profile) -> AppContext:
    """The context for one app; must be called inside a `gr.Blocks` block."""
    return AppContext(
        runs_dir=runs_dir,
        profile=profile,
        dataset=gr.State(None),
        mapped=gr.State(None),
        # Not validated here: the app starts even before the bundled weights are built, and
        # the Model tab validates a choice when asked to.
        model=gr.State(dragon.ResolvedModel.bundled()),
        run=gr.State(None),
    )
