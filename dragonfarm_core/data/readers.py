"""Read a data file into a pandas DataFrame whose cells are all `str` (missing = None).

Formats: CSV, TSV, JSON (an array of objects), JSON Lines, Parquet and Excel .xlsx, chosen by
the file's extension or by `format=`. Text files must be UTF-8 (a BOM is fine, so are CRLF line
ends and quoted multi-line cells); a file that is not text at all (an image, an archive renamed
.csv) is refused as such (`sniff.py`), not as a wrong encoding.

Reading is bounded (`limits.py`): a file larger than max_bytes is refused before it is read,
and rows and cell sizes are checked as rows come. CSV, TSV, JSON Lines and JSON arrays are
streamed from the file (checked as UTF-8 in chunks first, so an error still names its line), so
memory holds the rows, not the file's text several times over, and reading stops at the row
limit. Parquet and .xlsx, which expand when read, are in `packed.py`.

Every failure is a `DatasetError` that names the file and the line, row or column at fault.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from dragonfarm_core.data.cells import cell_text, frame_from_records, frame_from_rows
from dragonfarm_core.data.errors import DatasetError
from dragonfarm_core.data.jsonfiles import json_array_items, read_jsonl_items
from dragonfarm_core.data.limits import MAX_BYTES_ENV, ReadLimits, max_dataset_bytes
from dragonfarm_core.data.packed import read_parquet, read_xlsx
from dragonfarm_core.data.sniff import SNIFF_BYTES, binary_kind

FORMATS = ("csv", "tsv", "json", "jsonl", "parquet", "xlsx")
EXTENSIONS = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".xlsx": "xlsx",
}
CHUNK_BYTES = 1 << 20  # how much of a text file is checked as UTF-8 at a time


def detect_format(path: Path, format: str | None) -> str:
    """The reader to use: `format=` when given, else the file's extension."""
    if format is not None:
        fmt = str(format).lower().lstrip(".")
        if fmt not in FORMATS:
            raise DatasetError(
                f"format={format!r} is not supported for {path}; use one of {', '.join(FORMATS)}."
            )
        return fmt
    ext = path.suffix.lower()
    if ext in EXTENSIONS:
        return EXTENSIONS[ext]
    hint = " Old Excel .xls files are not supported: save as .xlsx or CSV." if ext == ".xls" else ""
    raise DatasetError(
        f"{path}: cannot tell the format from the extension {ext or '(none)'!r}.{hint} "
        f"Rename the file or pass format= one of {', '.join(FORMATS)}."
    )


def check_file(path: str | os.PathLike[str], max_bytes: int | None = None) -> Path:
    """The absolute path, after checking it is a non-empty file under the size cap."""
    p = Path(path).expanduser().resolve()
    if not p.exists():
        raise DatasetError(
            f"{p}: no such file. Check the path (relative paths start at {Path.cwd()})."
        )
    if not p.is_file():
        raise DatasetError(
            f"{p} is a folder, not a file; pass the path of the data file inside it."
        )
    size = p.stat().st_size
    cap = max_dataset_bytes(max_bytes)
    if size > cap:
        raise DatasetError(
            f"{p} is {size:,} bytes, above the {cap:,}-byte limit. Use a sample of the file, or "
            f"raise the limit with max_bytes= or the {MAX_BYTES_ENV} environment variable."
        )
    if size == 0:
        raise DatasetError(f"{p} is empty (0 bytes); choose the file that holds your data.")
    return p


def _not_text(path: Path, head: bytes) -> None:
    kind = binary_kind(head)
    if kind is not None:
        raise DatasetError(
            f"{path} is not a text file: it looks like {kind}. CSV, TSV, JSON and JSONL files "
            "are text; choose the file that holds your data, or export it as CSV (UTF-8)."
        )


def _not_utf8(path: Path, data: bytes, at: int, offset: int, line: int) -> DatasetError:
    """The error for a byte that is not UTF-8: data[at] is byte `offset` of the file, on `line`."""
    return DatasetError(
        f"{path} is not valid UTF-8: byte 0x{data[at]:02X} at byte offset {offset} "
        f"(line {line}). Re-save the file as UTF-8 (Excel: 'CSV UTF-8'), or convert it, "
        f"e.g. `iconv -f latin1 -t utf-8 old.csv > new.csv`."
    )


def _blank(path: Path) -> DatasetError:
    return DatasetError(f"{path} holds only whitespace; choose the file that holds your data.")


def read_text(path: Path) -> str:
    """The file decoded as UTF-8, without a BOM; other encodings are refused with the place."""
    data = path.read_bytes()
    _not_text(path, data[:SNIFF_BYTES])
    bom = data.startswith(b"\xef\xbb\xbf")
    body = data[3:] if bom else data
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = exc.start + (3 if bom else 0)
        raise _not_utf8(path, data, offset, offset, data[:offset].count(b"\n") + 1) from None
    if not text.strip():
        raise _blank(path)
    return text


def check_text(path: Path) -> None:
    """What read_text checks (text, UTF-8, not blank), reading CHUNK_BYTES at a time."""
    with path.open("rb") as f:
        _not_text(path, f.read(SNIFF_BYTES))
        f.seek(0)
        carry, offset, lines, filled = b"", 0, 0, False
        while True:
            chunk = f.read(CHUNK_BYTES)
            data = carry + chunk
            try:
                data.decode("utf-8")
                good = len(data)
            except UnicodeDecodeError as exc:
                if exc.reason != "unexpected end of data" or not chunk:
                    line = lines + data[: exc.start].count(b"\n") + 1
                    raise _not_utf8(path, data, exc.start, offset + exc.start, line) from None
                good = exc.start  # a character cut by the chunk's end: finish it next time
            filled = filled or bool(data[:good].strip(b" \t\r\n\x0b\x0c\xef\xbb\xbf"))
            lines += data[:good].count(b"\n")
            offset, carry = offset + good, data[good:]
            if not chunk:
                break
    if not filled:
        raise _blank(path)


def text_lines(path: Path) -> Iterator[str]:
    """The lines of a checked text file (check_text), BOM dropped, split at "\\n" only."""
    with path.open(encoding="utf-8-sig", newline="\n") as f:
        for line in f:
            yield line.removesuffix("\n")


def text_chunks(path: Path) -> Iterator[str]:
    """The text of a checked text file (check_text), BOM dropped, CHUNK_BYTES characters at
    a time."""
    with path.open(encoding="utf-8-sig", newline="") as f:
        while chunk := f.read(CHUNK_BYTES):
            yield chunk


def read_file(
    path: str | os.PathLike[str], format: str | None = None, max_bytes: int | None = None
) -> tuple[pd.DataFrame, Path, str]:
    """Read a data file: (frame of str/None cells, absolute path, format)."""
    p = check_file(path, max_bytes)
    fmt = detect_format(p, format)
    limits = ReadLimits.for_read(max_bytes)
    if fmt in ("csv", "tsv"):
        frame = read_delimited(p, "\t" if fmt == "tsv" else ",", limits)
    elif fmt in ("json", "jsonl"):
        frame = _read_records(p, fmt, limits)
    elif fmt == "parquet":
        frame = read_parquet(p, limits)
    else:
        frame = read_xlsx(p, limits)
    if len(frame) == 0:
        raise DatasetError(
            f"{p} has column names ({', '.join(map(str, frame.columns))}) but no rows; "
            f"add at least one row of data."
        )
    return frame, p, fmt


def _read_records(path: Path, fmt: str, limits: ReadLimits) -> pd.DataFrame:
    check_text(path)
    items = []
    reading = (
        json_array_items(path, text_chunks(path))
        if fmt == "json"
        else read_jsonl_items(path, text_lines(path))
    )
    for item in reading:
        items.append(item)
        limits.check_rows(len(items), path)
    frame = frame_from_records([obj for _, obj in items], path)
    header = [str(c) for c in frame.columns]
    for (where, _), row in zip(items, frame.itertuples(index=False, name=None), strict=True):
        limits.check_cells(list(row), header, path, where)
    return frame


def read_delimited(path: Path, delimiter: str, limits: ReadLimits | None = None) -> pd.DataFrame:
    """CSV or TSV with a header row; a row with the wrong number of cells is refused."""
    limits = limits or ReadLimits.for_read()
    check_text(path)
    # A long document in one cell is legitimate training data; raise the csv module's
    # 128 KiB per-field default (it only grows here, never shrinks: the setting is global).
    # limits.max_cell_chars bounds a cell instead, once its row is read.
    csv.field_size_limit(max(csv.field_size_limit(), 1 << 30))
    kind = "TSV" if delimiter == "\t" else "CSV"
    header: list[str] | None = None
    rows: list[list[str | None]] = []
    start = 1
    with path.open(encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter=delimiter, strict=True)
        try:
            for row in reader:
                if not row or (len(row) == 1 and not row[0].strip() and header is not None):
                    start = reader.line_num + 1
                    continue  # blank lines (often trailing) carry no data
                if header is None:
                    header = row
                    limits.check_cells(list(row), row, path, f"line {start} (the header)")
                elif len(row) != len(header):
                    raise DatasetError(
                        f"{path}, line {start}: {len(row)} cells, but the header has "
                        f"{len(header)} ({', '.join(header)}). Fix that row (a cell containing "
                        f"the delimiter must be quoted) or re-export the file as {kind}."
                    )
                else:
                    cells = [cell_text(c.replace("\r\n", "\n")) for c in row]
                    limits.check_cells(cells, header, path, f"line {start}")
                    rows.append(cells)
                    limits.check_rows(len(rows), path)
                start = reader.line_num + 1
        except csv.Error as exc:
            raise DatasetError(
                f"{path}, line {start}: malformed {kind} ({exc}). Check the quotes in the record "
                f'starting there: a quote inside a quoted cell must be doubled ("").'
            ) from None
    if header is None:
        raise DatasetError(f"{path} is empty; it needs a header row and at least one data row.")
    return frame_from_rows(header, rows, path)
