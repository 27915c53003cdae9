"""Hostile and huge files: every bound of `limits.py` refuses past it, naming the bound and
how to raise it, and a file inside the bounds still reads. The files are built here.

The bounds are lowered through their environment variables where a default-sized file would
be slow to write; the 1,000,000-character cell and the zip bomb are real size.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dragonfarm_core.data import DatasetError, dataset, neardup, report
from dragonfarm_core.data.limits import DEFAULT_MAX_CELL_CHARS


def _csv(path: Path, rows: int) -> Path:
    path.write_text("q,a\n" + "".join(f"question {i},answer {i}\n" for i in range(rows)))
    return path


@pytest.mark.parametrize("suffix", ["csv", "tsv", "jsonl", "json", "parquet", "xlsx"])
def test_every_format_stops_past_the_row_limit(tmp_path, monkeypatch, suffix):
    frame = pd.DataFrame({"q": [f"question {i}" for i in range(11)], "a": ["x"] * 11})
    path = tmp_path / f"t.{suffix}"
    if suffix in ("csv", "tsv"):
        frame.to_csv(path, index=False, sep="," if suffix == "csv" else "\t")
    elif suffix == "jsonl":
        frame.to_json(path, orient="records", lines=True)
    elif suffix == "json":
        frame.to_json(path, orient="records")
    elif suffix == "parquet":
        frame.to_parquet(path)
    else:
        frame.to_excel(path, index=False)
    monkeypatch.setenv("DRAGONFARM_MAX_DATASET_ROWS", "11")
    assert len(dataset(path)) == 11
    monkeypatch.setenv("DRAGONFARM_MAX_DATASET_ROWS", "10")
    with pytest.raises(DatasetError, match=r"more than 10 rows.*DRAGONFARM_MAX_DATASET_ROWS"):
        dataset(path)


def test_a_cell_past_the_limit_is_refused_naming_line_and_column(tmp_path, monkeypatch):
    long = "y" * (DEFAULT_MAX_CELL_CHARS + 1)
    path = tmp_path / "one_cell.csv"
    path.write_text(f"q,a\nfirst,fine\nsecond,{long}\n")
    with pytest.raises(DatasetError) as info:
        dataset(path)
    message = str(info.value)
    assert "line 3, column 'a'" in message and "1,000,001 characters" in message
    assert "1,000,000-character limit" in message and "DRAGONFARM_MAX_CELL_CHARS" in message
    monkeypatch.setenv("DRAGONFARM_MAX_CELL_CHARS", str(DEFAULT_MAX_CELL_CHARS + 1))
    assert dataset(path).frame["a"].str.len().max() == DEFAULT_MAX_CELL_CHARS + 1


def test_json_lines_and_arrays_check_their_cells(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAGONFARM_MAX_CELL_CHARS", "5")
    lines = tmp_path / "t.jsonl"
    lines.write_text('{"q": "short"}\n{"q": "longer"}\n')
    with pytest.raises(DatasetError, match=r"t\.jsonl, line 2, column 'q': a cell of 6"):
        dataset(lines)
    array = tmp_path / "t.json"
    array.write_text(json.dumps([{"q": "short"}, {"q": "longer"}]))
    with pytest.raises(DatasetError, match=r"t\.json, item 2, column 'q'"):
        dataset(array)


def _xlsx_with_sheet(path: Path, sheet_xml: bytes) -> Path:
    """A real workbook (openpyxl's) whose first sheet's XML is replaced by `sheet_xml`."""
    buffer = io.BytesIO()
    pd.DataFrame({"q": ["a"], "a": ["b"]}).to_excel(buffer, index=False)
    with zipfile.ZipFile(buffer) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for item in src.infolist():
            data = sheet_xml if item.filename == "xl/worksheets/sheet1.xml" else src.read(item)
            out.writestr(item, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
    return path


def _sheet(rows: int) -> bytes:
    # Rows and cells may leave out their r="A1" places; the same bytes over and over are what
    # a zip bomb is made of.
    body = '<row><c t="inlineStr"><is><t>same text</t></is></c></row>' * rows
    return (
        '<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
        f"<sheetData>{body}</sheetData></worksheet>"
    ).encode()


def test_an_xlsx_zip_bomb_is_refused_before_its_xml_is_parsed(tmp_path):
    bomb = _xlsx_with_sheet(tmp_path / "bomb.xlsx", _sheet(500_000))  # 28 MB of XML
    assert bomb.stat().st_size < 1_000_000
    with pytest.raises(DatasetError) as info:
        dataset(bomb)
    message = str(info.value)
    assert "xl/worksheets/sheet1.xml expands from" in message and "more than 100 times" in message
    assert "Export the sheet as CSV" in message


def test_an_xlsx_that_unpacks_past_max_bytes_is_refused(tmp_path):
    book = _xlsx_with_sheet(tmp_path / "big.xlsx", _sheet(5_000))  # 280 KB of XML
    with pytest.raises(DatasetError, match=r"the workbook, unpacked comes to .* bytes, above"):
        dataset(book, max_bytes=200_000)
    assert len(dataset(book)) == 4_999  # the first row is the header


def test_a_sheet_claiming_a_huge_size_reads_only_its_cells(tmp_path):
    sheet = _sheet(3).replace(b"<sheetData>", b'<dimension ref="A1:XFD1048576"/><sheetData>')
    assert len(dataset(_xlsx_with_sheet(tmp_path / "claims.xlsx", sheet))) == 2


def test_parquet_text_that_decodes_past_max_bytes_is_refused(tmp_path):
    # One 10 KB string repeated: dictionary-encoded and compressed, it decodes 1000 times over.
    table = pa.table({"q": pa.array(["z" * 10_000] * 2_000).dictionary_encode()})
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    assert path.stat().st_size < 100_000
    with pytest.raises(DatasetError, match=r"its text, decoded comes to .* above the 1,000,000"):
        dataset(path, max_bytes=1_000_000)


def test_the_report_bounds_its_near_duplicate_search(tmp_path, monkeypatch):
    rows = ["q,a"] + [f"Where is my order {i % 40}?,fine" for i in range(120)]
    rows += ["Where is my order number 7?,dup"]
    path = tmp_path / "t.csv"
    path.write_text("\n".join(rows) + "\n")
    ds = dataset(path).map(prompt="q", response="a")
    monkeypatch.setattr(neardup, "MAX_PAIRS", 10)  # one neighbour per band
    found = ds.report().near_duplicates
    assert found >= 1
    monkeypatch.setattr(report, "MAX_NEAR_ROWS", 100)
    bounded = ds.report()
    assert "looked for among the first 100 rows of 121" in " ".join(bounded.notes)
    assert bounded.exact_duplicates == ds.report().exact_duplicates


# -- a JSON array is streamed: read one element at a time, stopped at the row limit ------------


def test_a_json_array_stops_at_the_row_limit_before_reading_the_rest(tmp_path, monkeypatch):
    # Past row 10 the file is not even JSON: a reader that parses the array whole says so; a
    # streamed one stops at row 11 and names the row limit.
    rows = ",\n".join(json.dumps({"q": f"question {i}", "a": "x"}) for i in range(11))
    path = tmp_path / "t.json"
    path.write_text(f"[{rows},\n" + "not json " * 1000)
    monkeypatch.setenv("DRAGONFARM_MAX_DATASET_ROWS", "10")
    with pytest.raises(DatasetError, match=r"more than 10 rows.*DRAGONFARM_MAX_DATASET_ROWS"):
        dataset(path)


def test_a_json_array_past_the_row_limit_holds_only_the_rows_it_took(tmp_path, monkeypatch):
    import tracemalloc

    path = tmp_path / "big.json"
    path.write_text(json.dumps([{"q": f"question {i}", "a": "y" * 40} for i in range(200_000)]))
    assert path.stat().st_size > 14_000_000
    monkeypatch.setenv("DRAGONFARM_MAX_DATASET_ROWS", "1000")
    tracemalloc.start()
    try:
        with pytest.raises(DatasetError, match="more than 1,000 rows"):
            dataset(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # The file's text once is 14 MB; parsed whole it is several times that. Streamed: a chunk
    # of text (1 MB of characters) and 1,001 rows.
    assert peak < 8_000_000, f"peak {peak:,} bytes"


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64])
def test_a_json_array_reads_the_same_in_any_chunks(tmp_path, monkeypatch, chunk):
    from dragonfarm_core.data import readers

    items = [{"q": "é\u2028 line\nbreak", "n": 12345678901234, "f": -1.5e-7},
             {"q": "\\ud83d\\ude00", "n": 0, "f": True}, {"q": None}]  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text("\ufeff \r\n[\n " + " ,\r\n  ".join(json.dumps(i) for i in items) + "\n]\n")
    whole = dataset(path).frame
    monkeypatch.setattr(readers, "CHUNK_BYTES", chunk)
    assert dataset(path).frame.equals(whole)
    assert whole["n"].tolist() == ["12345678901234", "0", None]


@pytest.mark.parametrize(
    ("text", "place"),
    [
        ('[{"a": 1},\n {"a": 2,}]', "line 2, column 10"),
        ('[{"a": 1},\n\n  {"a": 2} {"a": 3}]', "line 3, column 12"),
        ('[{"a": 1},\n {"a": "open]', "line 2, column 8"),
        ('[{"a": 1}\n] x', "line 2, column 3"),
        ('[{"a": 1},\n', "line 2, column 1"),
    ],
)
@pytest.mark.parametrize("chunk", [1, 4, 1 << 20])
def test_a_broken_json_array_is_placed_in_any_chunks(tmp_path, monkeypatch, text, place, chunk):
    from dragonfarm_core.data import readers

    path = tmp_path / "bad.json"
    path.write_text(text)
    monkeypatch.setattr(readers, "CHUNK_BYTES", chunk)
    with pytest.raises(DatasetError, match=rf"bad\.json, {place}: invalid JSON"):
        dataset(path)
