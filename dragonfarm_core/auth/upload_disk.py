"""What uploads hold on disk, and removing the copies that no run refers to.

An upload lands twice: in Gradio's cache (the app's own GRADIO_TEMP_DIR, which Gradio clears of
files older than an hour through `gr.Blocks(delete_cache=...)`) and, once the Data tab reads it,
as a copy in `<runs dir>/uploads/` that run configs name as their dataset's source. So the disk
uploads use, which a profile caps as a whole (`UploadCaps`, whatever cookie a request carries),
is the cache plus every uploads folder under the app's runs root: its own, and each lab user's
or Space visitor's (`<root>/<users|visitors>/<id>/uploads/`).

A copy is removed once no run, archived run or pipeline record in its runs dir mentions it and
it is older than KEEP_S: a person who loaded a file an hour ago and has not trained yet still
has it. A copy the Data tab could not read is removed at once.

    in_use = disk_in_use(upload_folders(root) + [cache])
    removed = sweep(runs_dir)
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from dragonfarm_core.rundir.files import ARCHIVED_DIR, CONFIG, PIPELINES_DIR, UPLOADS_DIR

KEEP_S = 24 * 3600  # an unused copy is kept this long after its last upload


def upload_folders(root: Path) -> list[Path]:
    """The uploads folders under an app's runs root: its own and each owner's."""
    return [root / UPLOADS_DIR, *sorted(root.glob(f"*/*/{UPLOADS_DIR}"))]


def _files(folder: Path) -> Iterator[os.DirEntry[str]]:
    """Every regular file under `folder` (links not followed); nothing when it is missing."""
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                yield from _files(Path(entry.path))
            elif entry.is_file(follow_symlinks=False):
                yield entry


def disk_in_use(folders: Iterable[Path]) -> int:
    """Bytes the regular files under `folders` take (a file gone meanwhile counts 0)."""
    total = 0
    for folder in folders:
        for entry in _files(folder):
            with contextlib.suppress(OSError):
                total += entry.stat(follow_symlinks=False).st_size
    return total


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _records(runs_dir: Path) -> Iterator[Path]:
    """Every file that may name an upload: runs' and archived runs' configs, pipelines."""
    yield from runs_dir.glob(f"*/{CONFIG}")
    yield from runs_dir.glob(f"{ARCHIVED_DIR}/*/{CONFIG}")
    yield from runs_dir.glob(f"{PIPELINES_DIR}/*.json")


def referenced(runs_dir: Path) -> set[Path]:
    """The files under `<runs_dir>/uploads/` that a run, archived run or pipeline names."""
    uploads = (runs_dir / UPLOADS_DIR).resolve()
    found: set[Path] = set()
    for record in _records(runs_dir):
        try:
            data = json.loads(record.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a torn or odd record names nothing we can trust
        for text in _strings(data):
            if UPLOADS_DIR in text:
                path = Path(text).resolve()
                if path.is_relative_to(uploads):
                    found.add(path)
    return found


def sweep(runs_dir: Path, keep_s: float = KEEP_S) -> list[Path]:
    """Remove the uploads no run refers to that are older than keep_s; the removed paths."""
    folder = runs_dir / UPLOADS_DIR
    if not folder.is_dir():
        return []
    used, cutoff, removed = referenced(runs_dir), time.time() - keep_s, []
    for entry in _files(folder):
        path = Path(entry.path)
        with contextlib.suppress(OSError):
            if entry.stat(follow_symlinks=False).st_mtime < cutoff and path.resolve() not in used:
                path.unlink()
                removed.append(path)
    return removed
