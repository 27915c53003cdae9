"""A background job's record followed from a page: a pipeline (Pipelines tab) or a sweep (the
Train tab's Sweep). Both keep a JSON record in a folder of the runs dir (`pipelines/<id>.json`,
`sweeps/<id>.json`) and are watched the same way:

- `resolve` turns what the page names (an id or a path: the picker takes any text) into a
  record inside that folder, refusing what lies outside before anything is read;
- a `gr.Timer` calls the tab's `tick`, which asks `unchanged` whether the record (and what it
  follows) was written since the page last read it (`Seen`); while the job is active it reads
  again every LIVENESS_S anyway, which is how a job whose process died is noticed;
- `refresh_choices` adds new records to the picker, reading nothing while the folder did not
  change, and picks the newest while none is picked (so a reloaded page reattaches);
- `buttons` greys out Cancel and Resume by the job's status; `then_show` runs Cancel or Resume
  and shows the record again, with the refusal in the error box.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from dragonfarm_core.rundir import refs
from ui import watch

LIVENESS_S = 10.0
ACTIVE = ("queued", "running")
RESUMABLE = ("failed", "cancelled")
# What starting, cancelling or resuming a job may raise (PipelineError, SweepError included).
ERRORS = (FileNotFoundError, RuntimeError, ValueError, TypeError, OSError)
RECORD_SUFFIX = ".json"


@dataclass(frozen=True)
class Seen:
    """What a page last read: which record, at which version, when, was its job active."""

    ref: str | None
    version: Any
    read_at: float
    active: bool


def seen(ref: str | None, version: Any = None, status: Any = None) -> Seen:
    """What a page has just read (now), of a job in `status`."""
    return Seen(ref, version, time.monotonic(), status in ACTIVE)


def resolve(ref: str | None, home: Path, noun: str, check: Callable[[Path], Any]) -> Path:
    """The record a page names (its id, or its path) in the folder `home` of `noun`s; raises
    OutsideFolderError (a ValueError) for one outside, ValueError for a blank one,
    FileNotFoundError for none there. `check(path)` opens it (and raises FileNotFoundError for
    a file that is not a record)."""
    home = home.resolve()
    text = (ref or "").strip()
    if not text:
        raise ValueError(f"No {noun} given: pick one of the listed {noun}s.")
    bare = len(Path(text).parts) == 1 and not text.endswith(RECORD_SUFFIX)
    path = refs.resolve_inside(f"{text}{RECORD_SUFFIX}" if bare else text, home, f"{noun}s folder")
    if path.parent != home or path.suffix != RECORD_SUFFIX or not path.is_file():
        raise FileNotFoundError(f"No {noun} {text!r} in {home}; pick one of the listed ones.")
    check(path)
    return path


def unchanged(ref: str | None, last: Seen | None, version_of: Callable[[str], Any]) -> bool:
    """Whether a tick may skip reading: the page shows `ref` already, `version_of(ref)` is what
    it read, and its job is not active and due a look."""
    if last is None or last.ref != ref:
        return False
    try:
        version = version_of(ref) if ref else None
    except (FileNotFoundError, ValueError):
        version = None
    due = last.active and time.monotonic() - last.read_at >= LIVENESS_S
    return version == last.version and not due


def refresh_choices(
    home: Path, last: Any, current: str | None, choices: Callable[[], list[tuple[str, str]]]
) -> tuple[Any, Any]:
    """Timer tick -> (picker update, version seen): new records in `home` appear; with none
    picked, the newest is shown. Reads nothing while the folder did not change."""
    try:
        version = home.stat().st_mtime_ns
    except OSError:
        version = -1  # no records yet (None is "never looked")
    if version == last:
        return gr.skip(), gr.skip()
    listed = choices()
    values = [value for _, value in listed]
    keep = current if current in values else (values[0] if values else None)
    return gr.update(choices=listed, value=keep), version


def buttons(status: Any) -> tuple[Any, Any]:
    """(Cancel, Resume) for a job in `status`."""
    return (
        gr.update(interactive=status in ACTIVE, value="Cancel"),
        gr.update(interactive=status in RESUMABLE),
    )


def then_show(
    action: Callable[[], Any], show: Callable[..., tuple[Any, ...]], ref: str | None,
    *, toast: bool = False,
) -> tuple[Any, ...]:  # fmt: skip
    """Run Cancel's or Resume's `action`, then `show(ref)` the record; a refusal shows in its
    error box (and as a toast with `toast`)."""
    try:
        action()
    except ERRORS as e:
        if toast:
            watch.warn(str(e))
        return show(ref, str(e))
    return show(ref)


def wire(
    timer: gr.Timer, widgets: dict[str, Any], view: list[Any], last: gr.State, *,
    show: Callable[..., Any], tick: Callable[..., Any], refresh: Callable[..., Any],
    cancel: Callable[..., Any], resume: Callable[..., Any],
) -> None:  # fmt: skip
    """The watch's events: `widgets` holds the picker, Cancel and Resume; each handler is the
    tab's, bound to its runs dir. A pick shows the record, the timer ticks it and the picker's
    choices, Cancel greys itself out at once (stopping can take seconds), Resume restarts."""
    picker, stop, listed = widgets["picker"], widgets["cancel"], gr.State(None)
    quiet: dict[str, Any] = {"show_progress": "hidden"}
    picker.change(show, picker, view, **quiet)
    timer.tick(tick, [picker, last], view, **quiet)
    timer.tick(refresh, [listed, picker], [picker, listed], **quiet)
    stop.click(lambda: gr.update(value="Cancelling…", interactive=False), None, stop).then(
        cancel, picker, view
    )
    widgets["resume"].click(resume, picker, view)
