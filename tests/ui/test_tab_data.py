"""Data tab handlers: upload (good, bad, too big, twice, binary), what a failed upload keeps
and says (one message, the user's file name), the example data, the report."""

from __future__ import annotations

import warnings
from pathlib import Path

import gradio as gr
import pandas as pd

import dragonfarm_core as dragon
from ui.tabs import data

SKIP = gr.skip()
MODEL = dragon.ResolvedModel.bundled()


def test_upload_is_copied_into_the_runs_folder_and_shown(qa_csv: Path, uploads_dir: Path):
    ds, table, summary, report, code, error, box = data.load_upload(
        str(qa_csv), MODEL, None, uploads_dir, 10
    )
    assert box == SKIP  # the uploaded file stays shown
    assert isinstance(ds, dragon.Dataset) and ds.columns == ["question", "topic", "answer"]
    assert Path(ds.source) == (uploads_dir / "qa.csv").resolve()
    assert (uploads_dir / "qa.csv").read_bytes() == qa_csv.read_bytes()
    rows = table["value"]
    assert isinstance(rows, pd.DataFrame) and len(rows) == 3
    assert rows.loc[0, "answer"] == "Hold the reset pin for 10 s."
    assert len(table["column_widths"]) == 3  # every column sized to fit the window
    assert "3 rows" in summary and "`topic`" in summary
    assert "exact duplicates" in report
    assert "import dragonfarm_core as dragon" in code
    assert f'dragon.dataset("{ds.source}")' in code
    assert error == ""


def test_same_file_reuses_its_copy_and_another_file_never_overwrites(
    qa_csv: Path, uploads_dir: Path, tmp_path: Path
):
    first = data.load_upload(str(qa_csv), MODEL, None, uploads_dir, 10)[0]
    again = data.load_upload(str(qa_csv), MODEL, None, uploads_dir, 10)[0]
    assert again.source == first.source
    other = tmp_path / "elsewhere" / "qa.csv"
    other.parent.mkdir()
    other.write_text("question,answer\nWhat?,That.\n")
    third = data.load_upload(str(other), MODEL, None, uploads_dir, 10)[0]
    assert Path(third.source).name == "qa-2.csv"
    assert (uploads_dir / "qa.csv").read_bytes() == qa_csv.read_bytes()


def test_unreadable_file_shows_an_error_and_changes_nothing(tmp_path: Path, uploads_dir: Path):
    bad = tmp_path / "broken.jsonl"
    bad.write_text('{"question": "fine", "answer": "ok"}\n{"question": oops\n')
    out = data.load_upload(str(bad), MODEL, None, uploads_dir, 10)
    assert out[:5] == (SKIP,) * 5  # dataset, table, summary, report and code stay as they were
    assert 'class="df-error"' in out[5] and "broken.jsonl" in out[5]
    assert "No dataset is loaded yet." in out[5]


def test_unsupported_type_and_oversized_files_are_refused(tmp_path: Path, uploads_dir: Path):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    out = data.load_upload(str(notes), MODEL, None, uploads_dir, 10)
    assert out[0] == SKIP and ".csv" in out[5] and ".txt" in out[5]
    big = tmp_path / "big.csv"
    big.write_text("a,b\n" + "x,y\n" * 300_000)  # about 1.1 MB
    out = data.load_upload(str(big), MODEL, None, uploads_dir, 1)
    assert out[0] == SKIP and "up to 1 MB" in out[5]
    assert not (uploads_dir / "big.csv").exists()


def test_no_file_changes_nothing(uploads_dir: Path):
    assert data.load_upload(None, MODEL, None, uploads_dir, 10) == (SKIP,) * 7


def test_example_data_loads_with_portable_code():
    ds, table, summary, _report, code, error, box = data.load_example(MODEL, None)
    assert box is None  # a file shown in the upload box would no longer be the active data
    assert {"subject", "body", "product", "reply"} <= set(ds.columns)
    assert len(table["value"]) == min(len(ds), 20)
    assert "dragon.dataset(dragon.example_data())" in code
    assert error == ""


def test_report_follows_the_mapping(qa_csv: Path, uploads_dir: Path, chat_model):
    ds = data.load_upload(str(qa_csv), MODEL, None, uploads_dir, 10)[0]
    raw = data.show_report(ds, None, chat_model)
    mapped = data.show_report(ds, ds.map(prompt="question", response="answer"), chat_model)
    assert "Data report" in raw and raw != mapped
    assert "prompt" in mapped and "response" in mapped
    assert data.show_report(None, None, chat_model) == ""


PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00"


def refused(upload: Path, current: dragon.Dataset | None, uploads_dir: Path) -> str:
    """The problem box of an upload that must fail; it must raise no toast (a warning) too."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # gr.Warning outside a request is a UserWarning
        out = data.load_upload(str(upload), MODEL, current, uploads_dir, 10)
    assert out[:5] == (SKIP,) * 5
    assert out[6] is None  # the upload box empties: its file is not the active one
    return out[5]


def test_a_failed_upload_keeps_the_active_dataset_and_says_so(
    qa_csv: Path, uploads_dir: Path, tmp_path: Path
):
    current = data.load_upload(str(qa_csv), MODEL, None, uploads_dir, 10)[0]
    empty = tmp_path / "gradio-tmp" / "empty.csv"
    empty.write_bytes(b"")
    problem = refused(empty, current, uploads_dir)
    assert "empty.csv is empty (0 bytes)" in problem
    assert "Kept qa.csv (3 rows) as the active dataset." in problem
    # The person's file name, never the copy under the runs folder they never saw.
    assert str(uploads_dir) not in problem and "uploads" not in problem


def test_a_binary_file_is_not_a_text_file_not_an_encoding_problem(
    tmp_path: Path, uploads_dir: Path
):
    fake = tmp_path / "gradio-tmp" / "photo.csv"
    fake.parent.mkdir()
    fake.write_bytes(PNG + bytes(range(256)) * 4)
    problem = refused(fake, None, uploads_dir)
    assert "photo.csv is not a text file: it looks like a PNG image" in problem
    assert "iconv" not in problem and "UTF-8:" not in problem
    assert "`" not in problem  # code spans render as <code>, never as literal backticks


def test_an_encoding_problem_shows_its_command_as_code(tmp_path: Path, uploads_dir: Path):
    latin = tmp_path / "gradio-tmp" / "latin.csv"
    latin.parent.mkdir()
    latin.write_bytes("q,a\ncaf\xe9,ok\n".encode("latin-1"))
    problem = refused(latin, None, uploads_dir)
    assert "latin.csv is not valid UTF-8" in problem
    assert "<code>iconv -f latin1 -t utf-8 old.csv &gt; new.csv</code>" in problem


def test_an_upload_past_a_read_limit_is_refused_naming_it(tmp_path: Path, uploads_dir: Path,
                                                          qa_csv: Path):  # fmt: skip
    current = data.load_upload(str(qa_csv), MODEL, None, uploads_dir, 10)[0]
    huge = tmp_path / "one_cell.csv"
    huge.write_text("question,answer\nWhat?," + "y" * 1_000_001 + "\n")
    out = data.load_upload(str(huge), MODEL, current, uploads_dir, 10)
    assert out[:5] == (SKIP,) * 5  # qa.csv stays loaded
    assert "one_cell.csv, line 2, column &#x27;answer&#x27;" in out[5]
    assert "1,000,000-character limit" in out[5] and "DRAGONFARM_MAX_CELL_CHARS" in out[5]
    assert "qa" in out[5]  # says which dataset is still active
    assert not (uploads_dir / "one_cell.csv").exists()  # no copy of a file nobody can use
