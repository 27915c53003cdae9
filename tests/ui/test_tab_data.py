"""Data tab handlers: upload (good, bad, too big, twice), the example data, the report."""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import pandas as pd
import pytest

import dragonfarm_core as dragon
from ui.tabs import data

SKIP = gr.skip()


def test_upload_is_copied_into_the_runs_folder_and_shown(qa_csv: Path, uploads_dir: Path):
    ds, table, summary, report, code, error = data.load_upload(
        str(qa_csv), dragon.ResolvedModel.bundled(), uploads_dir, 10
    )
    assert isinstance(ds, dragon.Dataset) and ds.columns == ["question", "topic", "answer"]
    assert Path(ds.source) == (uploads_dir / "qa.csv").resolve()
    assert (uploads_dir / "qa.csv").read_bytes() == qa_csv.read_bytes()
    assert isinstance(table, pd.DataFrame) and len(table) == 3
    assert table.loc[0, "answer"] == "Hold the reset pin for 10 s."
    assert "3 rows" in summary and "`topic`" in summary
    assert "exact duplicates" in report
    assert "import dragonfarm_core as dragon" in code
    assert f'dragon.dataset("{ds.source}")' in code
    assert error == ""


def test_same_file_reuses_its_copy_and_another_file_never_overwrites(
    qa_csv: Path, uploads_dir: Path, tmp_path: Path
):
    first = data.load_upload(str(qa_csv), dragon.ResolvedModel.bundled(), uploads_dir, 10)[0]
    again = data.load_upload(str(qa_csv), dragon.ResolvedModel.bundled(), uploads_dir, 10)[0]
    assert again.source == first.source
    other = tmp_path / "elsewhere" / "qa.csv"
    other.parent.mkdir()
    other.write_text("question,answer\nWhat?,That.\n")
    third = data.load_upload(str(other), dragon.ResolvedModel.bundled(), uploads_dir, 10)[0]
    assert Path(third.source).name == "qa-2.csv"
    assert (uploads_dir / "qa.csv").read_bytes() == qa_csv.read_bytes()


def test_unreadable_file_shows_an_error_and_changes_nothing(tmp_path: Path, uploads_dir: Path):
    bad = tmp_path / "broken.jsonl"
    bad.write_text('{"question": "fine", "answer": "ok"}\n{"question": oops\n')
    with pytest.warns(UserWarning, match="broken.jsonl"):
        out = data.load_upload(str(bad), dragon.ResolvedModel.bundled(), uploads_dir, 10)
    assert out[:5] == (SKIP,) * 5  # dataset, table, summary, report and code stay as they were
    assert 'class="df-error"' in out[5] and "broken.jsonl" in out[5]


def test_unsupported_type_and_oversized_files_are_refused(tmp_path: Path, uploads_dir: Path):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    with pytest.warns(UserWarning):
        out = data.load_upload(str(notes), dragon.ResolvedModel.bundled(), uploads_dir, 10)
    assert out[0] == SKIP and ".csv" in out[5] and ".txt" in out[5]
    big = tmp_path / "big.csv"
    big.write_text("a,b\n" + "x,y\n" * 300_000)  # about 1.1 MB
    with pytest.warns(UserWarning):
        out = data.load_upload(str(big), dragon.ResolvedModel.bundled(), uploads_dir, 1)
    assert out[0] == SKIP and "up to 1 MB" in out[5]
    assert not (uploads_dir / "big.csv").exists()


def test_no_file_changes_nothing(uploads_dir: Path):
    assert data.load_upload(None, dragon.ResolvedModel.bundled(), uploads_dir, 10) == (SKIP,) * 6


def test_example_data_loads_with_portable_code():
    ds, table, summary, _report, code, error = data.load_example(dragon.ResolvedModel.bundled())
    assert {"subject", "body", "product", "reply"} <= set(ds.columns)
    assert len(table) == min(len(ds), 20)
    assert "dragon.dataset(dragon.example_data())" in code
    assert error == ""


def test_report_follows_the_mapping(qa_csv: Path, uploads_dir: Path, chat_model):
    ds = data.load_upload(str(qa_csv), dragon.ResolvedModel.bundled(), uploads_dir, 10)[0]
    raw = data.show_report(ds, None, chat_model)
    mapped = data.show_report(ds, ds.map(prompt="question", response="answer"), chat_model)
    assert "Data report" in raw and raw != mapped
    assert "prompt" in mapped and "response" in mapped
    assert data.show_report(None, None, chat_model) == ""
