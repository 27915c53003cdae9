"""Which runs changed on disk: one watchdog Observer per app process counts changes per run.

The Monitor, Runs and Train tabs poll with `gr.Timer`. Each tick asks for a counter here and
compares it with the last one its page saw: equal means nothing was written, so the tick reads
no file at all. The counters are bumped by filesystem events (inotify on Linux) from the
trainer, a second app, or a Python session, so every page sees every writer.

    version = run_version(run_dir)      # bumps on any write inside that run's folder (its jobs too)
    version = runs_version(runs_dir)    # bumps when the runs table may have changed

The observer starts on first use, watching each runs directory asked about, recursively. If a
directory cannot be watched (inotify limits, a network filesystem) its counters change on every
call instead, so pages fall back to reading on every tick rather than missing updates.

A page that starts a background job (an evaluation, a judge, a synthesis) watches it the same
way: `wire_job` ticks its timer and wires its Cancel, `job_buttons` greys out Start while the
job runs, `warn` toasts a refusal; `select_run` and `succeeded_runs` fill its run picker.
"""

from __future__ import annotations

import html
import itertools
import os
import threading
import warnings
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gradio as gr
from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

import dragonfarm_core as dragon
from dragonfarm_core.rundir import files

# Writes only: opening and reading a file (which the pages themselves do) must not count as a
# change, or every read would trigger the next one.
WRITE_EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
]
# Folders in a runs directory that hold no runs (archived/ does: it is handled apart).
NOT_RUNS = files.RESERVED - {files.ARCHIVED_DIR}
# Appended at every logged step: they change a run's view, not the runs table.
STEP_FILES = frozenset({files.PROGRESS, files.LOG})

# watchdog re-registers a moved folder's inotify watch (archive, unarchive) and warns that it
# does; the watch keeps working, so the warning would only alarm whoever reads the app's log.
warnings.filterwarnings("ignore", "Callback with id", RuntimeWarning, r"watchdog\.observers\.")

_lock = threading.Lock()
_observer: BaseObserver | None = None
_watched: dict[Path, bool] = {}  # runs dir -> True when watched, False when it fell back
_counts: defaultdict[Path, int] = defaultdict(int)  # run dir or runs dir -> changes seen
_fallback = itertools.count(1)


def changed_keys(root: Path, path: str) -> tuple[Path | None, bool]:
    """For a changed path under runs dir `root`: (the run folder it belongs to, or None; whether
    the runs table may have changed)."""
    try:
        parts = Path(path).relative_to(root).parts
    except ValueError:
        return None, False
    base = root
    if parts and parts[0] == files.ARCHIVED_DIR:
        base, parts = root / files.ARCHIVED_DIR, parts[1:]
    if not parts:
        return None, True  # archived/ itself appeared or went
    if base == root and parts[0] in NOT_RUNS:
        return None, False
    if len(parts) > 1 and parts[1] == files.JOBS_DIR:
        return base / parts[0], False  # a job on the run (an evaluation): not its table row
    return base / parts[0], parts[-1] not in STEP_FILES


class _Counter(FileSystemEventHandler):
    def __init__(self, root: Path) -> None:
        self.root = root

    def on_any_event(self, event: FileSystemEvent) -> None:
        for path in (event.src_path, event.dest_path):
            if not path:
                continue
            run, table = changed_keys(self.root, os.fsdecode(path))
            with _lock:
                if run is not None:
                    _counts[run] += 1
                if table:
                    _counts[self.root] += 1


def _watch(root: Path) -> bool:
    """Make sure `root` is watched; False when it cannot be (counters then always change)."""
    global _observer
    with _lock:
        if root in _watched:
            return _watched[root]
        try:
            if _observer is None:
                _observer = Observer()
                _observer.daemon = True  # never keeps the app process alive
                _observer.start()
            root.mkdir(parents=True, exist_ok=True)
            _observer.schedule(_Counter(root), str(root), recursive=True, event_filter=WRITE_EVENTS)
            _watched[root] = True
        except OSError as e:
            warnings.warn(
                f"Cannot watch {root} for changes ({e}); the app re-reads runs on every tick "
                "instead. On Linux, raise fs.inotify.max_user_watches to fix this.",
                stacklevel=3,
            )
            _watched[root] = False
        return _watched[root]


def _runs_dir_of(run_dir: Path) -> Path:
    parent = run_dir.parent
    return parent.parent if parent.name == files.ARCHIVED_DIR else parent


def run_version(run_dir: str | os.PathLike[str]) -> int:
    """A number that changes whenever something in this run's folder is written."""
    run = Path(run_dir).resolve()
    if not _watch(_runs_dir_of(run)):
        return -next(_fallback)
    with _lock:
        return _counts[run]


def runs_version(runs_dir: str | os.PathLike[str]) -> int:
    """A number that changes whenever a run appears, goes, or changes state in `runs_dir`."""
    root = Path(runs_dir).resolve()
    if not _watch(root):
        return -next(_fallback)
    with _lock:
        return _counts[root]


def refresh_picker(
    runs_dir: Path,
    seen: int | None,
    current: str | list[str] | None,
    choices: Callable[[Path], list[tuple[str, str]]],
    fallback: Callable[[list[str]], str | None],
) -> tuple[Any, Any]:
    """A run picker's update -> (picker update, version seen). Reads the runs only when one
    changed since `seen`; keeps `current` while it is listed, else `fallback(values)`. A
    multi-select picker (`current` a list) keeps those of its runs that are still listed."""
    version = runs_version(runs_dir)
    if version == seen:
        return gr.skip(), gr.skip()
    listed = choices(runs_dir)
    values = [value for _, value in listed]
    keep: str | list[str] | None
    if isinstance(current, list):
        keep = [value for value in current if value in values]
    else:
        keep = current if current in values else fallback(values)
    return gr.update(choices=listed, value=keep), version


# -- a job watched from a page --------------------------------------------------------------------


def succeeded_runs(runs_dir: Path) -> list[tuple[str, str]]:
    """Succeeded runs, newest first, as (label, run folder)."""
    table = dragon.runs(runs_dir)
    done = table[table["state"] == "succeeded"]
    return [(f"{r.id} ({r.method})", str(runs_dir / r.id)) for r in done.itertuples()]


def select_run(
    runs_dir: Path, wanted: str | None, choices: Callable[[Path], list[tuple[str, str]]]
) -> Any:
    """The run selected on another tab, picked here too once `choices` lists it."""
    listed = choices(runs_dir)
    if wanted not in [value for _, value in listed]:
        return gr.skip()
    return gr.update(choices=listed, value=wanted)


def warn(message: str) -> None:
    """A toast with the message's first line (escaped: Gradio shows it as HTML)."""
    gr.Warning(html.escape(message.splitlines()[0]))


def job_buttons(active: bool) -> tuple[Any, Any, Any]:
    """(Cancel button, start button, timer): Cancel and the timer only while a job runs."""
    return (
        gr.update(interactive=active, value="Cancel"),
        gr.update(interactive=not active),
        gr.Timer(active=active),
    )


def wire_job(
    timer: gr.Timer,
    stop: gr.Button,
    state: gr.State,
    view: Sequence[Any],
    tick: Callable[[Any], tuple[Any, ...]],
    cancel: Callable[[Any], tuple[Any, ...]],
) -> None:
    """The timer shows `tick(job state)`; Cancel greys itself out at once (stopping can take
    seconds), then shows `cancel(job state)`."""
    timer.tick(tick, state, list(view), show_progress="hidden")
    stop.click(lambda: gr.update(value="Cancelling…", interactive=False), None, stop).then(
        cancel, state, list(view)
    )
