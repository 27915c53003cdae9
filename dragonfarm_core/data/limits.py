"""How much a data file may hold: bytes, rows, and characters in one cell.

A file is hostile input in the app (an upload) and can be an accident in Python (a huge export).
The readers check these bounds as they go, so what they hold in memory stays proportional to
what they have accepted, and a file past a bound is refused naming the bound and how to raise
it. Each has an environment variable; the bytes also `dataset(..., max_bytes=)`.

    bytes  the file, and what it expands to (an .xlsx's     DRAGONFARM_MAX_DATASET_BYTES  1 GiB
           XML, a Parquet file's decoded text)
    rows   rows of data                                     DRAGONFARM_MAX_DATASET_ROWS   1,000,000
    cell   characters in one cell                           DRAGONFARM_MAX_CELL_CHARS     1,000,000

A cell of a million characters is about 250,000 tokens, far past any training length; a million
rows of short text take about 1 GB in the app (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dragonfarm_core.data.errors import DatasetError

MAX_BYTES_ENV = "DRAGONFARM_MAX_DATASET_BYTES"
MAX_ROWS_ENV = "DRAGONFARM_MAX_DATASET_ROWS"
MAX_CELL_ENV = "DRAGONFARM_MAX_CELL_CHARS"
DEFAULT_MAX_BYTES = 1 << 30
DEFAULT_MAX_ROWS = 1_000_000
DEFAULT_MAX_CELL_CHARS = 1_000_000


def _from_env(name: str, default: int, unit: str) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise DatasetError(
            f"{name}={raw!r} is not a positive number of {unit}; set it to e.g. {default} "
            "(the default) or unset it."
        )
    return value


def max_dataset_bytes(max_bytes: int | None = None) -> int:
    """The size cap in bytes: the argument, else the environment variable, else 1 GiB."""
    if max_bytes is not None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
            raise DatasetError(f"max_bytes must be a positive whole number, got {max_bytes!r}.")
        return max_bytes
    return _from_env(MAX_BYTES_ENV, DEFAULT_MAX_BYTES, "bytes")


@dataclass(frozen=True)
class ReadLimits:
    """The bounds one read works under (`for_read` fills them from arguments and env)."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_rows: int = DEFAULT_MAX_ROWS
    max_cell_chars: int = DEFAULT_MAX_CELL_CHARS

    @classmethod
    def for_read(cls, max_bytes: int | None = None) -> ReadLimits:
        return cls(
            max_dataset_bytes(max_bytes),
            _from_env(MAX_ROWS_ENV, DEFAULT_MAX_ROWS, "rows"),
            _from_env(MAX_CELL_ENV, DEFAULT_MAX_CELL_CHARS, "characters"),
        )

    def check_rows(self, n: int, source: Path | str) -> None:
        """Refuse once a reader has more than max_rows rows (call it as rows come)."""
        if n > self.max_rows:
            raise DatasetError(
                f"{source} has more than {self.max_rows:,} rows, the limit for one dataset. "
                f"Use a sample of the file, or raise the limit with the {MAX_ROWS_ENV} "
                "environment variable (memory grows with the rows)."
            )

    def check_cells(self, cells: list[str | None], header: list[str], source: Path | str,
                    where: str) -> None:  # fmt: skip
        """Refuse a row holding a cell longer than max_cell_chars, naming its column."""
        for i, cell in enumerate(cells):
            if cell is not None and len(cell) > self.max_cell_chars:
                column = header[i] if i < len(header) else f"column {i + 1}"
                raise DatasetError(
                    f"{source}, {where}, column {column!r}: a cell of {len(cell):,} characters, "
                    f"above the {self.max_cell_chars:,}-character limit for one cell (about "
                    f"{self.max_cell_chars // 4:,} tokens, past any training length). Shorten "
                    f"or split that text, or raise the limit with the {MAX_CELL_ENV} "
                    "environment variable."
                )

    def check_expanded(self, size: int, what: str, source: Path | str) -> None:
        """Refuse a file whose content expands past max_bytes (`what` says what expands)."""
        if size > self.max_bytes:
            raise DatasetError(
                f"{source}: {what} comes to {size:,} bytes, above the {self.max_bytes:,}-byte "
                f"limit. Use a sample of the data, or raise the limit with max_bytes= or the "
                f"{MAX_BYTES_ENV} environment variable."
            )
