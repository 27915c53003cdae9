"""Turn whatever a reader produced into the one frame shape the data layer uses.

A dataset's frame has string column names and cells that are `str` or None (missing). Keeping
everything as text means a template renders the same way whatever the file format, and an
answer such as "144" is compared as written. Empty strings count as missing.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dragonfarm_core.data.errors import DatasetError


def cell_text(value: Any) -> str | None:
    """One cell as text: None for missing, JSON for nested values, integral floats without .0.

    >>> cell_text(3.0), cell_text(2.5), cell_text(None), cell_text(""), cell_text([1, "a"])
    ('3', '2.5', None, None, '[1, "a"]')
    """
    if value is None:
        return None
    if isinstance(value, str):
        return value if value != "" else None
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        x = float(value)
        if math.isnan(x):
            return None
        # Integer columns with a gap become floats in pandas; show 144, not 144.0.
        return str(int(x)) if x.is_integer() and abs(x) < 1e15 else repr(x)
    if isinstance(value, list | tuple | dict | np.ndarray):
        return json.dumps(_plain(value), ensure_ascii=False, default=str)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace") or None
    if value is pd.NaT or value is pd.NA:
        return None
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    return str(value)


def surrogate_at(text: str) -> int | None:
    """Where `text` holds a lone surrogate (None when it holds none): half of a UTF-16 pair,
    which JSON's \\uD83D escapes can produce alone and which no UTF-8 file can hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def check_utf8(value: Any, where: str) -> None:
    """Refuse text (a str, or the strings inside a parsed JSON value) that cannot be written as
    UTF-8, naming `where` (file, row, column) and the character; otherwise the run's data
    file would fail later with a UnicodeEncodeError that names no row."""
    if isinstance(value, dict):
        for key, item in value.items():
            check_utf8(key, f"{where}, a key")
            check_utf8(item, f"{where}, key {key!r}")
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_utf8(item, f"{where}, element {i}")
        return
    if not isinstance(value, str):
        return
    at = surrogate_at(value)
    if at is not None:
        raise DatasetError(
            f"{where}: the text holds a lone surrogate (U+{ord(value[at]):04X} at character "
            f"{at}, after {value[max(0, at - 20) : at]!r}), half of a two-part character: "
            "usually a broken \\uD83D-style escape in JSON or an emoji cut in two. It cannot be "
            "saved as UTF-8. Fix or delete that character in the source, then load it again."
        )


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def column_names(header: Sequence[Any], source: Path | str) -> list[str]:
    """Column names stripped of surrounding spaces; blanks named column_<n>; no duplicates."""
    names: list[str] = []
    for i, raw in enumerate(header, start=1):
        name = "" if raw is None else str(raw).strip()
        names.append(name or f"column_{i}")
    seen: dict[str, int] = {}
    for i, name in enumerate(names, start=1):
        if name in seen:
            raise DatasetError(
                f"{source}: column {i} and column {seen[name]} are both named {name!r}; "
                f"rename one so each column can be mapped unambiguously."
            )
        seen[name] = i
    return names


def frame_from_rows(
    header: Sequence[Any], rows: list[list[str | None]], source: Path | str
) -> pd.DataFrame:
    """A frame from a header and rows of cells that are already text."""
    columns = column_names(header, source)
    if not rows:
        return pd.DataFrame({c: pd.Series([], dtype=object) for c in columns})
    # dtype=object keeps None as None (pandas 3 would otherwise make a str column with NaN).
    return pd.DataFrame(rows, columns=columns, dtype=object)


def frame_from_records(records: list[dict[str, Any]], source: Path | str) -> pd.DataFrame:
    """A frame from JSON objects: one column per key, in order of first appearance."""
    keys: dict[str, None] = {}
    for rec in records:
        keys.update(dict.fromkeys(str(k) for k in rec))
    header = list(keys)
    # JSON object keys are always strings, so a plain lookup finds every column.
    rows = [[cell_text(rec.get(k)) for k in header] for rec in records]
    return frame_from_rows(header, rows, source)


def normalise_frame(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    """A copy of a user's DataFrame in the data layer's shape (text cells, text column names)."""
    if not isinstance(frame, pd.DataFrame):
        raise DatasetError(f"{source}: expected a pandas DataFrame, got {type(frame).__name__}.")
    if frame.shape[1] == 0:
        raise DatasetError(f"{source} has no columns; build it with at least a prompt and a reply.")
    if len(frame) == 0:
        raise DatasetError(
            f"{source} has columns ({', '.join(map(str, frame.columns))}) but no rows; "
            f"add at least one row of data."
        )
    header = [str(c) for c in frame.columns]
    rows = [[cell_text(v) for v in row] for row in frame.itertuples(index=False, name=None)]
    # A file read from disk is valid UTF-8 already (JSON's escapes are checked where they are
    # parsed); text made in Python may hold a lone surrogate.
    for j, name in enumerate(header, start=1):
        check_utf8(name, f"{source}, the name of column {j}")
    for i, (index, row) in enumerate(zip(frame.index, rows, strict=True), start=1):
        for name, cell in zip(header, row, strict=True):
            if cell is not None:
                check_utf8(cell, f"{source}, row {i} (index {index!r}), column {name!r}")
    return frame_from_rows(header, rows, source)
