"""Run references from outside the engine (a page, a request, a caller) kept inside a runs dir.

A run reference is a run id, a path to a run folder, or a `Run`. `resolve_run` turns one into
the run's folder and refuses anything that ends up outside the runs directory once `..` and
symlinks are resolved: an absolute path elsewhere, `../elsewhere/run`, a symlink in the runs
dir that points out. `resolve_inside` does the same for any other file a request may name.

    run_dir = resolve_run("20260914-101500-tiny-support", runs_dir)
    run_dir = resolve_run(picked_path, runs_dir, archived=True)   # archived/ too

A reference is never URL-decoded here: `..%2Frun` names a folder called `..%2Frun`. But one whose
decoded form would leave the folder is refused rather than looked up, so a layer that decodes
it further along (a proxy, a later route) cannot turn it into a way out either.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote

from dragonfarm_core.rundir import files

# Enough for %252F (encoded twice); a longer chain still gets the same check at each step.
DECODE_ROUNDS = 4


class OutsideFolderError(ValueError):
    """A reference that resolves outside the folder it must stay in (a ValueError, so every
    caller that shows a bad value shows this one too)."""


def _text(ref: object) -> str:
    """The reference as text: a str, a path, or a Run (anything with __fspath__)."""
    if isinstance(ref, str):
        return ref
    if isinstance(ref, os.PathLike):
        return os.fspath(ref)
    raise TypeError(f"A run is named by an id or a path, got {type(ref).__name__} ({ref!r}).")


def _decoded_forms(text: str) -> list[str]:
    """`text` percent-decoded once, twice, ... while that changes it (not `text` itself)."""
    forms, current = [], text
    for _ in range(DECODE_ROUNDS):
        decoded = unquote(current)
        if decoded == current:
            break
        forms.append(decoded)
        current = decoded
    return forms


def _refuse(ref: str, where: Path, root: Path, what: str) -> OutsideFolderError:
    shown = "" if str(where) == ref else f" (it resolves to {where})"
    return OutsideFolderError(
        f"Refused {ref!r}{shown}: it is outside the {what} {root}. Only what is inside it can "
        "be used here: pick one that is listed, or move the folder in first."
    )


def resolve_inside(
    path: str | os.PathLike[str], root: str | os.PathLike[str], what: str = "folder"
) -> Path:
    """`path` (relative to `root`, or absolute), with `~`, `..` and symlinks resolved; raises
    OutsideFolderError when that is not `root` or below it. Nothing needs to exist."""
    base = Path(root).expanduser().resolve()
    text = _text(path)
    if "\x00" in text:
        raise OutsideFolderError(f"Refused {text!r}: a path cannot hold a NUL character.")
    resolved = _within(text, base)
    if not resolved.is_relative_to(base):
        raise _refuse(text, resolved, base, what)
    for decoded in _decoded_forms(text):
        if "\x00" in decoded or not _within(decoded, base).is_relative_to(base):
            raise OutsideFolderError(
                f"Refused {text!r}: URL-decoded it reads {decoded!r}, which is outside the "
                f"{what} {base}. Use the name exactly as it is listed."
            )
    return resolved


def _within(text: str, base: Path) -> Path:
    """`text` read from `base` (an absolute path stays as it is), fully resolved."""
    return (base / Path(text).expanduser()).resolve()


def resolve_run(
    ref: str | os.PathLike[str], runs_dir: str | os.PathLike[str], archived: bool = False
) -> Path:
    """The folder of the run `ref` names (an id, a path, a Run) in `runs_dir`, symlinks resolved.

    Only a run directly in `runs_dir` counts, or, with `archived=True`, one in its archived/
    (an id is looked up there second). A relative path is taken from `runs_dir`, then from the
    working directory (the manual's `"dragonfarm_runs/<id>"`) when that lands inside too.
    Raises OutsideFolderError (a ValueError) for anything that resolves outside `runs_dir`,
    FileNotFoundError when no such run is there, ValueError for an empty reference.
    """
    root = Path(runs_dir).expanduser().resolve()
    text = "" if ref is None else _text(ref)
    if not text.strip():
        raise ValueError(f"No run given: pick one of the runs in {root}.")
    what = "runs directory"
    homes = {root, root / files.ARCHIVED_DIR} if archived else {root}
    given = Path(text).expanduser()
    # Looked at in turn, each only when the one before found nothing: a run found in the runs
    # dir is never refused because another reading of the same text would lead elsewhere.
    readings: list[Callable[[], Path | None]] = [lambda: resolve_inside(text, root, what)]
    if archived and len(given.parts) == 1:
        readings.append(lambda: resolve_inside(Path(files.ARCHIVED_DIR) / given, root, what))
    if not given.is_absolute():
        readings.append(lambda: _from_working_dir(text, given, root, what))
    for reading in readings:
        candidate = reading()
        if candidate is not None and candidate.parent in homes and files.is_run_dir(candidate):
            return candidate
    places = f"{root} or {root / files.ARCHIVED_DIR}" if archived else str(root)
    raise FileNotFoundError(
        f"No run {text!r} in {places}. dragon.runs() and dragon.archived_runs() list the runs."
    )


def _from_working_dir(text: str, given: Path, root: Path, what: str) -> Path | None:
    """`given` read from the working directory: the folder when it is inside `root`; None when
    it is no run; refused when it is a run elsewhere (the caller meant that one)."""
    here = given.resolve()
    if here.is_relative_to(root):
        return here
    if files.is_run_dir(here):
        raise _refuse(text, here, root, what)
    return None
