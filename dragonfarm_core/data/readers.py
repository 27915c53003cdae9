"""Read a data file into a pandas DataFrame whose cells are all `str` (missing = None).

Formats: CSV, TSV, JSON (an array of objects), JSON Lines, Parquet and Excel .xlsx, chosen by
the file's extension or by `format=`. Text files must be UTF-8 (a BOM is fine, so are CRLF line
ends and quoted multi-line cells); a file that is not text at all (an image, an archive renamed
.csv) is refused as such (`sniff.py`), not as a wrong encoding. Files larger than the cap are
refused before they are read: the cap is `max_bytes=`, else `DRAGONFARM_MAX_DATASET_BYTES`,
else 1 GiB.

Every failure is a `DatasetError` that names the file and the line, row or column at fault.
"""

from __future__ import annotations

import csv
import io
import os
import zipfile
from pathlib import Path
from typing import Any

import pandas as pd

from dragonfarm_core.data.cells import cell_text, frame_from_records, frame_from_rows
from dragonfarm_core.data.errors import DatasetError
from dragonfarm_core.data.jsonfiles import read_json_items, read_jsonl_items
from dragonfarm_core.data.sniff import binary_kind

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
DEFAULT_MAX_BYTES = 1 << 30
MAX_BYTES_ENV = "DRAGONFARM_MAX_DATASET_BYTES"


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


def max_dataset_bytes(max_bytes: int | None = None) -> int:
    """The size cap in bytes: the argument, else the environment variable, else 1 GiB."""
    if max_bytes is not None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
            raise DatasetError(f"max_bytes must be a positive whole number, got {max_bytes!r}.")
        return max_bytes
    raw = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise DatasetError(
            f"{MAX_BYTES_ENV}={raw!r} is not a positive number of bytes; "
            f"set it to e.g. {DEFAULT_MAX_BYTES} (1 GiB) or unset it."
        )
    return value


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


def read_text(path: Path) -> str:
    """The file decoded as UTF-8, without a BOM; other encodings are refused with the place."""
    data = path.read_bytes()
    kind = binary_kind(data)
    if kind is not None:
        raise DatasetError(
            f"{path} is not a text file: it looks like {kind}. CSV, TSV, JSON and JSONL files "
            "are text; choose the file that holds your data, or export it as CSV (UTF-8)."
        )
    bom = data.startswith(b"\xef\xbb\xbf")
    body = data[3:] if bom else data
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = exc.start + (3 if bom else 0)
        line = data[:offset].count(b"\n") + 1
        raise DatasetError(
            f"{path} is not valid UTF-8: byte 0x{data[offset]:02X} at byte offset {offset} "
            f"(line {line}). Re-save the file as UTF-8 (Excel: 'CSV UTF-8'), or convert it, "
            f"e.g. `iconv -f latin1 -t utf-8 old.csv > new.csv`."
        ) from None
    if not text.strip():
        raise DatasetError(f"{path} holds only whitespace; choose the file that holds your data.")
    return text


def read_file(
    path: str | os.PathLike[str], format: str | None = None, max_bytes: int | None = None
) -> tuple[pd.DataFrame, Path, str]:
    """Read a data file: (frame of str/None cells, absolute path, format)."""
    p = check_file(path, max_bytes)
    fmt = detect_format(p, format)
    if fmt in ("csv", "tsv"):
        frame = read_delimited(p, "\t" if fmt == "tsv" else ",")
    elif fmt == "json":
        frame = frame_from_records([obj for _, obj in read_json_items(p, read_text(p))], p)
    elif fmt == "jsonl":
        frame = frame_from_records([obj for _, obj in read_jsonl_items(p, read_text(p))], p)
    elif fmt == "parquet":
        frame = read_parquet(p)
    else:
        frame = read_xlsx(p)
    if len(frame) == 0:
        raise DatasetError(
            f"{p} has column names ({', '.join(map(str, frame.columns))}) but no rows; "
            f"add at least one row of data."
        )
    return frame, p, fmt


def read_delimited(path: Path, delimiter: str) -> pd.DataFrame:
    """CSV or TSV with a header row; a row with the wrong number of cells is refused."""
    text = read_text(path)
    # A long document in one cell is legitimate training data; raise the csv module's
    # 128 KiB per-field default (it only grows here, never shrinks).
    csv.field_size_limit(max(csv.field_size_limit(), 1 << 30))
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    kind = "TSV" if delimiter == "\t" else "CSV"
    header: list[str] | None = None
    rows: list[list[str | None]] = []
    start = 1
    try:
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip() and header is not None):
                start = reader.line_num + 1
                continue  # blank lines (often trailing) carry no data
            if header is None:
                header = row
            elif len(row) != len(header):
                raise DatasetError(
                    f"{path}, line {start}: {len(row)} cells, but the header has {len(header)} "
                    f"({', '.join(header)}). Fix that row (a cell containing the delimiter "
                    f"must be quoted) or re-export the file as {kind}."
                )
            else:
                rows.append([cell_text(c.replace("\r\n", "\n")) for c in row])
            start = reader.line_num + 1
    except csv.Error as exc:
        raise DatasetError(
            f"{path}, line {start}: malformed {kind} ({exc}). Check the quotes in the record "
            f'starting there: a quote inside a quoted cell must be doubled ("").'
        ) from None
    if header is None:
        raise DatasetError(f"{path} is empty; it needs a header row and at least one data row.")
    return frame_from_rows(header, rows, path)


def read_parquet(path: Path) -> pd.DataFrame:
    """A Parquet file, with every cell turned into text."""
    import pyarrow.parquet as pq  # loaded on first use: most datasets are CSV or JSON

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise DatasetError(
            f"{path} is not a readable Parquet file ({exc}). Re-export it, or pass the right format=."
        ) from None
    header = [str(name) for name in table.column_names]
    rows = [[cell_text(v) for v in rec.values()] for rec in table.to_pylist()]
    return frame_from_rows(header, rows, path)


def read_xlsx(path: Path) -> pd.DataFrame:
    """The first worksheet of an .xlsx workbook; its first row holds the column names."""
    import openpyxl
    from openpyxl.utils.exceptions import InvalidFileException

    try:
        book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except (zipfile.BadZipFile, InvalidFileException, KeyError, OSError) as exc:
        raise DatasetError(
            f"{path} is not a readable .xlsx workbook ({exc}). Open it in Excel and save it "
            f"again as .xlsx, or export the sheet as CSV."
        ) from None
    try:
        values = [list(r) for r in book.worksheets[0].iter_rows(values_only=True)]
    finally:
        book.close()
    values = [r for r in values if any(_filled(v) for v in r)]
    if not values:
        raise DatasetError(
            f"{path}: the first worksheet is empty; put a header row and data there."
        )
    width = max(i + 1 for r in values for i, v in enumerate(r) if _filled(v))
    header = [cell_text(v) or "" for v in (values[0] + [None] * width)[:width]]
    rows = [[cell_text(v) for v in (r + [None] * width)[:width]] for r in values[1:]]
    return frame_from_rows(header, rows, path)


def _filled(value: Any) -> bool:
    return value is not None and not (isinstance(value, str) and not value.strip())
