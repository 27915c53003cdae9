"""Parse JSON (an array of objects) and JSON Lines files into objects, keeping their place.

Each object comes back with a human label of where it was ("line 7", "item 3"), so that later
checks (a conversation without a user turn, say) can point at the exact spot in the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NoReturn

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
    """The objects of a JSON array held in `text`, each labelled "item <n>" (1-based)."""
    return list(json_array_items(path, [text]))


def json_array_items(path: Path, chunks: Iterable[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The objects of a JSON array, each labelled "item <n>", decoded one at a time from the
    file's text as `chunks` bring it (`readers.text_chunks`), so a reader can stop at its row
    limit without parsing, or holding, the rest of the file."""
    source = _Chunks(iter(chunks))
    if not source.skip_space() or source.buffer[source.pos] != "[":
        _refuse_whole(path, source.rest())  # not an array: say what it is, as json.loads sees it
    source.pos += 1
    decoder, n = json.JSONDecoder(), 0
    while True:
        if not source.skip_space():
            source.fail(path, "Expecting value")
        if n == 0 and source.buffer[source.pos] == "]":
            source.pos += 1
            source.finish(path)
            raise DatasetError(f"{path} holds an empty array; add at least one row object.")
        start = source.pos
        try:
            obj, end = decoder.raw_decode(source.buffer, start)
        except json.JSONDecodeError as exc:
            if source.more():  # the element may go on in the next chunk
                continue
            source.fail(path, exc.msg, exc.pos)
        if end >= len(source.buffer) and source.more():
            continue  # a number cut by the chunk's end reads as a shorter one: finish it first
        n += 1
        if not isinstance(obj, dict):
            raise DatasetError(
                f"{path}, item {n}: expected an object with one key per column, found "
                f"{_kind(obj)}. Make every element of the array an object."
            )
        if "\\u" in source.buffer[start:end]:  # valid UTF-8: only an escape makes a lone surrogate
            _check_text(obj, f"{path}, item {n}")
        yield f"item {n}", obj
        source.pos = end
        if not source.skip_space():
            source.fail(path, "Expecting ',' delimiter")
        mark = source.buffer[source.pos]
        source.pos += 1
        if mark == "]":
            source.finish(path)
            return
        if mark != ",":
            source.fail(path, "Expecting ',' delimiter", source.pos - 1)


class _Chunks:
    """The text not yet decoded (`buffer` from `pos`), topped up from the chunks as needed and
    trimmed of what was decoded, keeping count of the lines before it for error places."""

    def __init__(self, chunks: Iterator[str]) -> None:
        self.chunks, self.buffer, self.pos = chunks, "", 0
        self.lines, self.column = 0, 0  # line breaks before buffer[0]; its column - 1 on its line
        self.wanted = 0

    def more(self) -> bool:
        """Append text, at least as much as is held (a long element is not decoded from the
        start again for each chunk); False, the buffer as it was, at the end of the file."""
        self.wanted = max(self.wanted, len(self.buffer) - self.pos)
        added: list[str] = []
        for chunk in self.chunks:
            added.append(chunk)
            if sum(map(len, added)) > self.wanted:
                break
        if not added:
            return False
        dropped = self.buffer[: self.pos]
        breaks = dropped.count("\n")
        if breaks:
            self.column = len(dropped) - dropped.rfind("\n") - 1
        else:
            self.column += len(dropped)
        self.lines += breaks
        self.buffer, self.pos = self.buffer[self.pos :] + "".join(added), 0
        return True

    def skip_space(self) -> bool:
        """Move past whitespace; False when the file ends first."""
        while True:
            while self.pos < len(self.buffer) and self.buffer[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.buffer) or not self.more():
                return self.pos < len(self.buffer)

    def rest(self) -> str:
        while self.more():
            pass
        return self.buffer

    def finish(self, path: Path) -> None:
        """After the closing bracket: only whitespace may follow."""
        if self.skip_space():
            self.fail(path, "Extra data")

    def fail(self, path: Path, msg: str, at: int | None = None) -> NoReturn:
        at = self.pos if at is None else at
        line = self.buffer.count("\n", 0, at)
        column = at - self.buffer.rfind("\n", 0, at) if line else self.column + at + 1
        raise DatasetError(
            f"{path}, line {self.lines + line + 1}, column {column}: invalid JSON ({msg}). Fix "
            "the file there (a validator such as `python -m json.tool` shows the spot)."
        )


def _refuse_whole(path: Path, text: str) -> NoReturn:
    """The error for a file that is no JSON array (json.loads reads it whole to say why)."""
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
    raise DatasetError(f"{path}: expected a JSON array of objects, found {_kind(data)}.")


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
