"""Parse JSON (an array of objects) and JSON Lines files into objects, keeping their place.

Each object comes back with a human label of where it was ("line 7", "item 3"), so that later
checks (a conversation without a user turn, say) can point at the exact spot in the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from dragonfarm_core.data.cells import check_utf8
from dragonfarm_core.data.errors import DatasetError


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    names = {list: "an array", str: "a string", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _check_text(obj: dict[str, Any], where: str) -> None:
    """Refuse a lone surrogate in a row's column names or cells, naming the column."""
    for key, value in obj.items():
        check_utf8(key, f"{where}, a column name")
        check_utf8(value, f"{where}, column {key!r}")


def read_json_items(path: Path, text: str) -> list[tuple[str, dict[str, Any]]]:
    """The objects of a JSON array, each labelled "item <n>" (1-based)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        hint = (
            " The file looks like JSON Lines (one object per line): rename it to .jsonl or "
            "pass format='jsonl'."
            if exc.msg.startswith("Extra data")
            else " Fix the file there (a validator such as `python -m json.tool` shows the spot)."
        )
        raise DatasetError(
            f"{path}, line {exc.lineno}, column {exc.colno}: invalid JSON ({exc.msg}).{hint}"
        ) from None
    if isinstance(data, dict):
        lists = [k for k, v in data.items() if isinstance(v, list)]
        where = f" Its key {lists[0]!r} holds a list: save that list alone." if lists else ""
        raise DatasetError(
            f"{path}: expected a JSON array of objects (one per row), found one object.{where}"
        )
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON array of objects, found {_kind(data)}.")
    if not data:
        raise DatasetError(f"{path} holds an empty array; add at least one row object.")
    items = []
    escapes = "\\u" in text  # the text is valid UTF-8: only an escape can make a lone surrogate
    for i, obj in enumerate(data, start=1):
        if not isinstance(obj, dict):
            raise DatasetError(
                f"{path}, item {i}: expected an object with one key per column, found "
                f"{_kind(obj)}. Make every element of the array an object."
            )
        if escapes:
            _check_text(obj, f"{path}, item {i}")
        items.append((f"item {i}", obj))
    return items


def read_jsonl_items(path: Path, lines: Iterable[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The objects of a JSON Lines file, each labelled "line <n>"; blank lines are skipped.

    `lines` are split at "\\n" only (`text.split("\\n")`, or `readers.text_lines` streaming the
    file), never by splitlines(): JSON strings may hold a raw U+2028, which is no line end.
    """
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            hint = (
                " If the whole file is one JSON array, name it .json or pass format='json'."
                if n == 1 and line.lstrip().startswith("[")
                else " Each line must be one complete JSON object."
            )
            raise DatasetError(
                f"{path}, line {n}, column {exc.colno}: invalid JSON ({exc.msg}).{hint}"
            ) from None
        if not isinstance(obj, dict):
            raise DatasetError(
                f"{path}, line {n}: expected a JSON object with one key per column, found "
                f"{_kind(obj)}. Put one object per line."
            )
        if "\\u" in line:  # the text is valid UTF-8: only an escape can make a lone surrogate
            _check_text(obj, f"{path}, line {n}")
        yield f"line {n}", obj
