"""JSON and JSONL files that a reader never sees half-written, whoever kills the writer.

Whole files are written atomically: a temp file in the same folder (`.<name>.<random>.tmp`),
fsync, replace. A temp file that a killed writer left behind is removed once it is
TEMP_STALE_S old, by the next write in its folder (and by `files.read_status`). Append-only
JSONL files get one write call per line, always on a fresh line (after a torn one, a newline
first), and their readers skip a torn or garbled line (`read_jsonl_checked` says which).
Non-finite numbers are written as null, so the JSON stays standard. These functions name no
file: `files` names every file of a run and of a job, and calls these.
Pure standard library: the trainer and the app both import it.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

# A writer's temp file older than this is a leftover of a killed writer, not one in progress
# (a writer holds its temp file for the time of one write and one fsync).
TEMP_STALE_S = 120.0


def _finite(value: Any) -> Any:
    """Replace NaN and infinities by None, recursively, so the JSON stays standard."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def dumps(value: Any, indent: int | None = None) -> str:
    return json.dumps(_finite(value), indent=indent, ensure_ascii=False, allow_nan=False)


def _is_temp_name(name: str) -> bool:
    """`.<name>.<random>.tmp`, the name write_json and write_jsonl give their temp file (a
    dot-folder such as .locks, or .tmp-adapter, is not one)."""
    return name.startswith(".") and name.endswith(".tmp") and name.count(".") >= 3


def remove_stale_temps(folder: str | os.PathLike[str], older_than: float = TEMP_STALE_S) -> None:
    """Remove the temp files killed writers left in `folder` (files only, `older_than` s old).

    A temp file is only ever written by the process that created it, within one write call,
    so one this old belongs to nobody; a younger one may be a write in progress and stays.
    """
    try:
        entries = list(os.scandir(folder))
    except OSError:  # no folder, or not ours to list
        return
    cutoff = time.time() - older_than
    for entry in entries:
        if not _is_temp_name(entry.name):
            continue
        try:
            if entry.is_file(follow_symlinks=False) and entry.stat().st_mtime < cutoff:
                os.unlink(entry.path)
        except OSError:  # gone already, or a read-only copy of a run: leave it
            continue


def write_atomic(path: str | os.PathLike[str], write: Callable[[IO[str]], object]) -> None:
    """Write a text file atomically with `write(f)`: a reader sees the old file or the new
    one, never a mix, and a writer killed midway leaves only a temp file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    remove_stale_temps(path.parent)


def write_json(path: str | os.PathLike[str], value: Any) -> None:
    """Write JSON atomically (see write_atomic)."""
    text = dumps(
        value, indent=2
    )  # before the temp file: a value that cannot be written leaves none
    write_atomic(path, lambda f: f.write(text))


def read_json(path: str | os.PathLike[str], default: Any = None) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return default


def append_jsonl(path: str | os.PathLike[str], row: dict[str, Any]) -> None:
    """Append one row, as one write call (concurrent appenders never interleave), on a line of
    its own: a writer that failed midway (a full disk) left a torn line without its newline,
    so this row starts with one rather than be glued onto it and lost with it."""
    data = (dumps(row) + "\n").encode("utf-8")  # before opening: a row that cannot be written
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        while data:  # a regular file takes it whole; a short write goes on, an error raises
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


def _lone_surrogate(line: str, row: Any) -> bool:
    """Whether a parsed line holds a lone UTF-16 surrogate ("\\ud800"), which JSON's escapes
    allow and UTF-8 cannot encode: every later write of the row (a page, a file) would fail."""
    if "\\ud" not in line.lower():
        return False
    try:
        dumps(row).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _line_problem(raw: bytes) -> tuple[Any, str | None]:
    """(the row, None), or (None, what is wrong with this line of a JSONL file)."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"byte {e.start} is not UTF-8 text"
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        return None, f"it is not JSON ({e.msg}, column {e.colno})"
    if _lone_surrogate(line, row):
        return None, "it holds a lone surrogate (an escape such as \\ud800), not text"
    return row, None


def read_jsonl_checked(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Every line that is a JSON object, and what is wrong with each one that is not
    ("line 3: it is not JSON (...)"): a torn line, a garbled one, one that is not an object."""
    try:
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
    except FileNotFoundError:
        return [], []
    rows, problems = [], []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        row, problem = _line_problem(raw)
        if problem is None and not isinstance(row, dict):
            problem = f"it holds a JSON {type(row).__name__}, not an object"
        if problem is None:
            rows.append(row)
        else:
            problems.append(f"line {number}: {problem}")
    return rows, problems


def read_jsonl(path: str | os.PathLike[str], tolerant: bool = False) -> list[dict[str, Any]]:
    """Every complete row; a torn or garbled last line (writer killed mid-write) is skipped.

    tolerant: skip any line that is not a JSON object, for files that are only shown, such as
    progress.jsonl (read_jsonl_checked also says which and why); otherwise a garbled line
    before the last raises.
    """
    if tolerant:
        return read_jsonl_checked(path)[0]
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        return []
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i >= len(lines) - 2:  # the last line, maybe followed by ""
                continue
            raise
    return rows


def write_jsonl(path: str | os.PathLike[str], rows: list[dict[str, Any]]) -> None:
    """Write a whole JSONL file atomically (data files)."""
    lines = [dumps(row) + "\n" for row in rows]
    write_atomic(path, lambda f: f.writelines(lines))
