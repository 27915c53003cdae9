"""Readers of the packed formats, Parquet and .xlsx: files that expand when read.

A few hundred KB of .xlsx can hold hundreds of MB of XML (a zip bomb), and a Parquet file's
compressed or dictionary-encoded columns can decode to far more text than the file holds. So
both are checked against `limits.ReadLimits` before and while they expand:

- .xlsx: the zip's own directory says what each member expands to. A member that expands more
  than MAX_RATIO times (Apache POI's rule for Office files) or a total past max_bytes is
  refused before any XML is parsed; then rows and cells are bounded as the sheet is read.
- Parquet: the footer says how many rows there are; the text is decoded a batch at a time and
  counted against max_bytes, each cell against max_cell_chars.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import pandas as pd

from dragonfarm_core.data.cells import cell_text, frame_from_rows
from dragonfarm_core.data.errors import DatasetError
from dragonfarm_core.data.limits import ReadLimits

# A member may expand at most this many times (Apache POI's ZipSecureFile.MIN_INFLATE_RATIO
# is 0.01); real workbooks expand 3 to 20 times. Members under RATIO_FLOOR are not judged:
# tiny XML parts compress oddly well.
MAX_RATIO = 100
RATIO_FLOOR = 1 << 20
PARQUET_BATCH_ROWS = 1024  # rows decoded at a time: bounds a batch to ~1k cells per column


def read_parquet(path: Path, limits: ReadLimits) -> pd.DataFrame:
    """A Parquet file, with every cell turned into text."""
    import pyarrow.parquet as pq  # loaded on first use: most datasets are CSV or JSON

    try:
        parquet = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise DatasetError(
            f"{path} is not a readable Parquet file ({exc}). Re-export it, or pass the right format=."
        ) from None
    limits.check_rows(parquet.metadata.num_rows, path)
    header = [str(name) for name in parquet.schema_arrow.names]
    rows: list[list[str | None]] = []
    decoded = 0
    with parquet:
        for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS):
            for values in batch.to_pylist():
                cells = [cell_text(v) for v in values.values()]
                decoded += sum(len(c) for c in cells if c is not None)
                limits.check_cells(cells, header, path, f"row {len(rows) + 1}")
                rows.append(cells)
            limits.check_expanded(decoded, "its text, decoded", path)
    return frame_from_rows(header, rows, path)


def check_zip(path: Path, limits: ReadLimits) -> None:
    """Refuse a zip-based file that expands past max_bytes, or a member past MAX_RATIO."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise DatasetError(
            f"{path} is not a readable .xlsx workbook ({exc}). Open it in Excel and save it "
            f"again as .xlsx, or export the sheet as CSV."
        ) from None
    for m in members:
        if m.file_size > RATIO_FLOOR and m.file_size > MAX_RATIO * max(m.compress_size, 1):
            raise DatasetError(
                f"{path}: its part {m.filename} expands from {m.compress_size:,} to "
                f"{m.file_size:,} bytes, more than {MAX_RATIO} times: workbooks of real data do "
                "not (this is how a zip bomb looks). Export the sheet as CSV and load that."
            )
    limits.check_expanded(sum(m.file_size for m in members), "the workbook, unpacked", path)


def read_xlsx(path: Path, limits: ReadLimits) -> pd.DataFrame:
    """The first worksheet of an .xlsx workbook; its first row holds the column names."""
    import openpyxl
    from openpyxl.utils.exceptions import InvalidFileException

    check_zip(path, limits)
    try:
        book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except (zipfile.BadZipFile, InvalidFileException, KeyError, OSError) as exc:
        raise DatasetError(
            f"{path} is not a readable .xlsx workbook ({exc}). Open it in Excel and save it "
            f"again as .xlsx, or export the sheet as CSV."
        ) from None
    try:
        sheet = book.worksheets[0]
        sheet.reset_dimensions()  # the stored size can claim a million empty rows: ignore it
        values = _sheet_rows(sheet, limits, path)
    finally:
        book.close()
    if not values:
        raise DatasetError(
            f"{path}: the first worksheet is empty; put a header row and data there."
        )
    width = max(i + 1 for r in values for i, v in enumerate(r) if _filled(v))
    header = [cell_text(v) or "" for v in (values[0] + [None] * width)[:width]]
    rows = [[cell_text(v) for v in (r + [None] * width)[:width]] for r in values[1:]]
    return frame_from_rows(header, rows, path)


def _sheet_rows(sheet: Any, limits: ReadLimits, path: Path) -> list[list[Any]]:
    """The sheet's rows that hold a value, checked as they come."""
    values: list[list[Any]] = []
    for n, row in enumerate(sheet.iter_rows(values_only=True), start=1):
        cells = list(row)
        if not any(_filled(v) for v in cells):
            continue
        limits.check_cells([v if isinstance(v, str) else None for v in cells],
                           [f"column {i + 1}" for i in range(len(cells))], path,
                           f"sheet row {n}")  # fmt: skip
        values.append(cells)
        limits.check_rows(len(values) - 1, path)  # the first is the header
    return values


def _filled(value: Any) -> bool:
    return value is not None and not (isinstance(value, str) and not value.strip())
