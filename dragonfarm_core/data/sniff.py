"""Tell a file that is not text at all (an image, an archive) from text in the wrong encoding.

A PNG renamed `.csv` fails UTF-8 decoding like a Latin-1 CSV does, but advice to convert its
encoding sends a person the wrong way: it needs "this is not a text file". `binary_kind` looks
at the first bytes only: a known file signature, else a NUL byte (text files in UTF-8 or a
single-byte encoding do not contain one; UTF-16 text does, and is told by its byte-order mark).
"""

from __future__ import annotations

SNIFF_BYTES = 8192
# (leading bytes, what the file is); an .xlsx workbook is a zip archive.
SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"%PDF-", "a PDF document"),
    (b"PK\x03\x04", "a zip archive (an Excel .xlsx workbook is one: name it .xlsx)"),
    (b"\x1f\x8b", "a gzip archive (unpack it first)"),
    (b"PAR1", "a Parquet file (name it .parquet)"),
    (b"SQLite format 3\x00", "an SQLite database"),
    (b"\xd0\xcf\x11\xe0", "an old Office file such as .xls (save it as .xlsx or CSV)"),
)
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def binary_kind(data: bytes) -> str | None:
    """What a non-text file looks like ('a PNG image', 'binary data'), or None for text."""
    head = data[:SNIFF_BYTES]
    for signature, what in SIGNATURES:
        if head.startswith(signature):
            return what
    if head.startswith(UTF16_BOMS):
        return None  # UTF-16 text: an encoding to convert, not a wrong file
    return "binary data" if b"\x00" in head else None
