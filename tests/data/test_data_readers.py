"""Every reader, the cell normalisation, and every way a file can be refused."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from dragonfarm_core.data import Dataset, DatasetError, dataset
from dragonfarm_core.data.cells import cell_text

# -- readers ---------------------------------------------------------------------------------


def test_csv_with_bom_crlf_multiline_cells_and_unicode_columns(write):
    text = '\ufeffsubject,first name,Ünïcode côl\r\n"Line one\r\nline two",José,"say ""hi"""\r\nb,Zoë,\r\n'
    ds = dataset(write("t.csv", text))
    assert ds.columns == ["subject", "first name", "Ünïcode côl"]
    assert ds.frame["subject"].tolist() == ["Line one\nline two", "b"]
    assert ds.frame["Ünïcode côl"].tolist() == ['say "hi"', None]
    assert ds.format == "csv" and ds.name == "t"
    assert os.path.isabs(ds.source)


def test_csv_skips_blank_lines_and_strips_header_spaces(write):
    ds = dataset(write("t.csv", "\n a , b \n1,2\n\n3,4\n\n\n"))
    assert ds.columns == ["a", "b"]
    assert ds.frame.values.tolist() == [["1", "2"], ["3", "4"]]


def test_cells_are_text_or_none_and_keep_na_strings(write):
    ds = dataset(write("t.csv", "q,a\nNA,null\n,  \n"))
    assert ds.frame.values.tolist() == [["NA", "null"], [None, "  "]]
    assert all(isinstance(v, str) or v is None for v in ds.frame.values.ravel())


def test_tsv(write):
    ds = dataset(write("t.tsv", "q\ta b\nhello, world\tx\n"))
    assert ds.frame.to_dict("records") == [{"q": "hello, world", "a b": "x"}]


def test_json_array_of_objects(write):
    rows = [{"q": "a", "n": 3, "x": 1.5, "ok": True, "tags": ["t", 1]}, {"q": "b", "extra": None}]
    ds = dataset(write("t.json", json.dumps(rows)))
    assert ds.columns == ["q", "n", "x", "ok", "tags", "extra"]
    assert ds.frame.iloc[0].tolist() == ["a", "3", "1.5", "true", '["t", 1]', None]
    assert ds.frame.iloc[1].tolist() == ["b", None, None, None, None, None]


def test_jsonl_with_blank_lines_and_crlf(write):
    ds = dataset(write("t.jsonl", '{"q": "a\u2028b"}\r\n\r\n{"q": "c", "r": "d"}\r\n'))
    assert ds.frame.to_dict("records") == [{"q": "a\u2028b", "r": None}, {"q": "c", "r": "d"}]
    assert ds.format == "jsonl"


def test_parquet(tmp_path):
    df = pd.DataFrame({"q": ["a", None], "n": [1.0, float("nan")], "k": [7, 8]})
    df.to_parquet(tmp_path / "t.parquet")
    ds = dataset(tmp_path / "t.parquet")
    assert ds.frame.values.tolist() == [["a", "1", "7"], [None, None, "8"]]
    assert ds.format == "parquet"


def test_xlsx(tmp_path):
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.append(["question", "first name", None])
    sheet.append(["What is 2+2?", "Ana", None])
    sheet.append([144, None, None])
    sheet.append([None, None, None])
    book.save(tmp_path / "t.xlsx")
    ds = dataset(tmp_path / "t.xlsx")
    assert ds.columns == ["question", "first name"]
    assert ds.frame.values.tolist() == [["What is 2+2?", "Ana"], ["144", None]]


def test_dataframe_is_copied_and_normalised():
    df = pd.DataFrame({"q": ["a", "b"], 3: [1, None]})
    ds = dataset(df, name="mine")
    assert isinstance(ds, Dataset) and ds.source is None and ds.format == "dataframe"
    assert ds.columns == ["q", "3"] and ds.frame["3"].tolist() == ["1", None]
    df.loc[0, "q"] = "changed"
    assert ds.frame["q"].tolist() == ["a", "b"]
    assert ds.name == "mine" and dataset(df).name == "dataframe"


def test_format_argument_overrides_extension(write):
    ds = dataset(write("data.txt", "a,b\n1,2\n"), format="CSV")
    assert ds.format == "csv" and ds.frame.values.tolist() == [["1", "2"]]


def test_cell_text_conversions():
    import datetime as dt

    import numpy as np

    assert cell_text(np.int64(5)) == "5" and cell_text(np.float64(2.0)) == "2"
    assert cell_text(float("nan")) is None and cell_text(pd.NaT) is None
    assert cell_text(dt.date(2024, 1, 2)) == "2024-01-02"
    assert cell_text({"a": np.array([1, 2])}) == '{"a": [1, 2]}'
    assert cell_text(1e20) == "1e+20"


# -- size cap --------------------------------------------------------------------------------


def test_size_cap_argument_and_environment(write, monkeypatch):
    path = write("t.csv", "q,a\n" + "x,y\n" * 50)
    with pytest.raises(
        DatasetError, match=r"t\.csv is 204 bytes, above the 100-byte limit.*max_bytes"
    ):
        dataset(path, max_bytes=100)
    monkeypatch.setenv("DRAGONFARM_MAX_DATASET_BYTES", "100")
    with pytest.raises(DatasetError, match="DRAGONFARM_MAX_DATASET_BYTES"):
        dataset(path)
    assert len(dataset(path, max_bytes=1000)) == 50
    monkeypatch.setenv("DRAGONFARM_MAX_DATASET_BYTES", "lots")
    with pytest.raises(DatasetError, match="not a positive number of bytes"):
        dataset(path)


# -- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "pattern"),
    [
        ("empty.csv", "", r"empty\.csv is empty \(0 bytes\)"),
        ("blank.csv", "  \n\n", "holds only whitespace"),
        ("header.csv", "subject,reply\n", r"column names \(subject, reply\) but no rows"),
        ("header.tsv", "subject\treply\n\n", "but no rows"),
        ("empty.json", "[]", "empty array"),
        ("blank.jsonl", "\n\n \n", "holds only whitespace"),
        ("bad.json", '[{"a": 1},\n {"a": 2,}]', r"bad\.json, line 2, column 10: invalid JSON"),
        ("lines.json", '{"a": 1}\n{"a": 2}\n', r"line 2.*Extra data.*format='jsonl'"),
        ("obj.json", '{"rows": [{"a": 1}]}', r"found one object.*'rows' holds a list"),
        ("scalars.json", "[1, 2]", r"item 1: expected an object.*a number"),
        ("bad.jsonl", '{"a": 1}\n{"a": 2\n', r"bad\.jsonl, line 2, column 8: invalid JSON"),
        ("arr.jsonl", '[{"a": 1},\n{"a": 2}]', r"line 1.*name it \.json"),
        ("list.jsonl", '{"a": 1}\n[1]\n', r"line 2: expected a JSON object.*an array"),
        ("ragged.csv", "a,b\n1,2\n3,4,5\n", r"ragged\.csv, line 3: 3 cells, but the header has 2"),
        ("short.csv", 'a,b,c\n"x\ny",2,3\n4,5\n', r"line 4: 2 cells, but the header has 3"),
        ("quote.csv", 'a,b\n1,2\n3,"open\n', r"quote\.csv, line 3: malformed CSV"),
        ("dupe.csv", "a,b,a\n1,2,3\n", r"column 3 and column 1 are both named 'a'"),
        ("data.xls", "a,b\n1,2\n", r"data\.xls.*Old Excel \.xls.*\.xlsx"),
        ("data.txt", "a,b\n1,2\n", r"extension '\.txt'.*format= one of csv"),
        ("bad.xlsx", "not a zip", r"bad\.xlsx is not a readable \.xlsx workbook"),
        ("bad.parquet", "not parquet", r"bad\.parquet is not a readable Parquet file"),
    ],
)
def test_bad_files_are_refused_with_place_and_remedy(write, tmp_path, name, content, pattern):
    path = write(name, content)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(DatasetError, match=pattern) as err:
        dataset(path)
    assert str(path) in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_non_utf8_names_byte_offset_and_line(write):
    path = write("latin.csv", "q,a\nok,fine\ncaf\xe9,x\n".encode("latin-1"))
    with pytest.raises(
        DatasetError, match=r"not valid UTF-8: byte 0xE9 at byte offset 15 \(line 3\).*UTF-8"
    ):
        dataset(path)


def test_non_utf8_after_bom_counts_the_bom(write):
    with pytest.raises(DatasetError, match=r"byte 0xFF at byte offset 7 \(line 2\)"):
        dataset(write("b.csv", b"\xef\xbb\xbfq\nab\xff\n"))


@pytest.mark.parametrize(
    ("name", "content", "kind"),
    [
        ("photo.csv", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "a PNG image"),
        ("book.csv", b"PK\x03\x04\x14\x00\x06\x00\x08\x00\xff", "a zip archive (an Excel .xlsx"),
        ("blob.jsonl", b'{"q": 1}\n\x00\x01\x02\xff', "binary data"),
    ],
)
def test_a_binary_file_is_not_a_text_file(write, name, content, kind):
    with pytest.raises(DatasetError, match="not a text file") as caught:
        dataset(write(name, content))
    assert f"it looks like {kind}" in str(caught.value) and "iconv" not in str(caught.value)


def test_utf16_text_is_an_encoding_problem_not_a_binary_file(write):
    with pytest.raises(DatasetError, match="not valid UTF-8.*iconv"):
        dataset(write("excel.csv", "q,a\nhi,ho\n".encode("utf-16")))


def test_xlsx_header_only(tmp_path):
    import openpyxl

    book = openpyxl.Workbook()
    book.active.append(["q", "a"])
    book.save(tmp_path / "h.xlsx")
    with pytest.raises(DatasetError, match=r"column names \(q, a\) but no rows"):
        dataset(tmp_path / "h.xlsx")


def test_missing_file_folder_and_wrong_types(tmp_path):
    with pytest.raises(DatasetError, match="no such file"):
        dataset(tmp_path / "nope.csv")
    with pytest.raises(DatasetError, match="is a folder"):
        dataset(tmp_path)
    with pytest.raises(DatasetError, match="dragon.conversations"):
        dataset([{"role": "user"}])
    with pytest.raises(DatasetError, match="format= is for files"):
        dataset(pd.DataFrame({"a": ["x"]}), format="csv")
    (tmp_path / "x.yaml").write_text("a: 1\n")
    with pytest.raises(DatasetError, match="format='yaml' is not supported"):
        dataset(tmp_path / "x.yaml", format="yaml")
    with pytest.raises(DatasetError, match="no rows"):
        dataset(pd.DataFrame({"a": []}))
