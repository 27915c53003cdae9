"""The active-dataset line every data tab shows, and how it follows a failed upload."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

import dragonfarm_core as dragon
from ui import active_data
from ui.tabs import data, mapping

MODEL = dragon.ResolvedModel.bundled()


def test_the_line_names_the_file_rows_and_mapping(qa_csv: Path, uploads_dir: Path):
    ds = data.load_upload(str(qa_csv), MODEL, None, uploads_dir, 10)[0]
    assert active_data.active_markdown(None, None) == active_data.NONE_YET
    loaded = active_data.active_markdown(ds, None)
    assert loaded.startswith("**Active dataset:** `qa.csv` · 3 rows · not mapped yet")
    assert str(uploads_dir) not in loaded  # the file's name, not the copy's folder
    mapped = active_data.active_markdown(ds, ds.map(prompt="{question}", response="answer"))
    assert mapped == (
        "**Active dataset:** `qa.csv` · 3 rows · mapped as prompt → response (SFT): "
        "prompt `{question}`, response `answer`"
    )


def test_training_data_built_elsewhere_is_named_beside_the_loaded_file(qa_csv: Path):
    ds = dragon.dataset(qa_csv)
    rows = [{"q": "Hi?", "a": "Hello."}, {"q": "Bye?", "a": "Bye."}]
    feedback = dragon.dataset(pd.DataFrame(rows), name="sft-20261201").map("q", "a")
    line = active_data.active_markdown(ds, feedback)
    assert line.startswith("**Loaded file:** `qa.csv` · 3 rows  \n**Training data:** ")
    assert "`sft-20261201` · 2 rows · prompt → response (SFT) (built in another tab" in line
    assert active_data.active_markdown(None, feedback).startswith("**Training data:**")


def test_a_failed_upload_leaves_every_tab_on_the_old_dataset(
    qa_csv: Path, uploads_dir: Path, tmp_path: Path, chat_model
):
    """Data keeps the old dataset (gr.skip), so Mapping remaps the old one and the line names it."""
    ds = data.load_upload(str(qa_csv), MODEL, None, uploads_dir, 10)[0]
    mapped = mapping.remap(ds, chat_model, "sft", {"prompt": "{question}", "response": "answer"})[0]
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    out = data.load_upload(str(empty), MODEL, ds, uploads_dir, 10)
    assert out[0] == data.gr.skip()  # ctx.dataset is not written: Mapping and Train keep ds
    assert "Kept qa.csv (3 rows)" in out[5]
    assert "`qa.csv` · 3 rows · mapped as" in active_data.active_markdown(ds, mapped)


def test_mapping_errors_name_the_file_not_its_copy(qa_csv: Path, uploads_dir: Path, chat_model):
    ds = data.load_upload(str(qa_csv), MODEL, None, uploads_dir, 10)[0]
    error = mapping.remap(ds, chat_model, "sft", {"prompt": "{question}", "response": "{reply}"})[4]
    assert "which qa.csv does not have" in error and str(uploads_dir) not in error


def test_a_template_with_line_breaks_stays_one_code_span(qa_csv: Path):
    """The example data's prompt `{subject}\\n\\n{body}` broke the span over two lines, leaving
    stray backticks on every tab's line (seen in a 1400 px walk); it reads as the code does."""
    ds = dragon.dataset(qa_csv)
    mapped = ds.map(prompt="{question}\n\n{answer}", response="answer")
    line = active_data.active_markdown(ds, mapped)
    assert "\n" not in line
    assert line.endswith("prompt `{question}\\n\\n{answer}`, response `answer`")
