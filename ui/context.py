"""What the tabs share, passed to each tab's `build(ctx)` explicitly.

Tabs never import each other. The few things they share are here: where runs live, the
deployment profile (policy the core defines in `dragonfarm_core.profiles`), and four pieces of
per-browser-session state (the loaded dataset, the mapped dataset, the chosen model and the
selected run). A tab reads a state by listing it as
an input and writes it by listing it as an output; each state has one writer, so changes never
bounce between tabs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.profiles import Profile
from dragonfarm_core.rundir.files import UPLOADS_DIR


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
