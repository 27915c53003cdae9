"""Raw errors become messages that name the file, row and column and say what to do: a lone
surrogate in a cell, a runs dir that is a file, a model path that is a file."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.data.errors import DatasetError
from dragonfarm_core.models import ModelError, resolve_model

LONE = "\\ud800"  # a JSON escape of half a UTF-16 pair
SURROGATE = "the text holds a lone surrogate (U+D800 at character"


def _jsonl_rows(bad_row: str) -> str:
    rows = [json.dumps({"q": f"question {i}", "a": f"answer {i}"}) for i in range(5)]
    rows[2] = bad_row
    return "\n".join(["", *rows]) + "\n"  # a blank first line: line numbers are file lines


def test_a_lone_surrogate_in_a_jsonl_cell_names_line_and_column(write):
    path = write("d.jsonl", _jsonl_rows('{"q": "fine", "a": "bad ' + LONE + ' cell"}'))
    with pytest.raises(DatasetError) as caught:
        dragon.dataset(path)
    message = str(caught.value)
    assert message.startswith(f"{path}, line 4, column 'a': {SURROGATE} 4, after 'bad ')")
    assert "Fix or delete that character" in message


def test_a_valid_surrogate_pair_and_an_escaped_backslash_are_fine(write):
    pair = '{"q": "smile \\ud83d\\ude00", "a": "a path C:\\\\ud800"}'
    frame = dragon.dataset(write("ok.jsonl", _jsonl_rows(pair))).frame
    assert frame["q"][2] == "smile \U0001f600" and frame["a"][2] == "a path C:\\ud800"


def test_a_lone_surrogate_in_a_json_array_or_a_column_name(write):
    items = [{"q": "x", "a": "y"}, {"q": "x", "a": "y"}]
    text = json.dumps(items).replace('"y"}]', '"y \\udfff"}]')
    with pytest.raises(DatasetError, match=re.escape("d.json, item 2, column 'a': the text")):
        dragon.dataset(write("d.json", text))
    with pytest.raises(DatasetError, match=re.escape("line 1, a column name: the text holds")):
        dragon.dataset(write("k.jsonl", '{"q' + LONE + '": "x"}\n'))


def test_a_lone_surrogate_in_a_dataframe_or_a_conversation(tmp_path):
    # dtype=object: pandas' own string columns refuse such text already.
    frame = pd.DataFrame(
        {"q": ["fine", "bad \ud800"], "a": ["y", "y"]}, index=[10, 11], dtype=object
    )
    with pytest.raises(DatasetError, match=re.escape("row 2 (index 11), column 'q': the text")):
        dragon.dataset(frame)
    chat = [[{"role": "user", "content": "hi \udc00"}, {"role": "assistant", "content": "ok"}]]
    with pytest.raises(DatasetError, match=re.escape("conversation 0, message 0 (user): the text")):
        dragon.conversations(chat)
    transcripts = tmp_path / "t.jsonl"
    transcripts.write_text(
        '{"messages": [{"role": "user", "content": "hi ' + LONE + '"}, '
        '{"role": "assistant", "content": "ok"}]}\n'
    )
    with pytest.raises(DatasetError, match=re.escape("line 1, column 'messages', element 0, key")):
        dragon.conversations(transcripts)


def test_a_runs_dir_that_is_a_file_says_so_and_writes_nothing(runs_root, model_dir, tmp_path):
    rows = [{"q": f"Device {i} reboots", "a": f"Reset it ({i})."} for i in range(6)]
    ds = dragon.dataset(pd.DataFrame(rows)).map(prompt="q", response="a")
    not_a_folder = tmp_path / "runs.txt"
    not_a_folder.write_text("notes")
    with pytest.raises(NotADirectoryError) as caught:
        dragon.train(ds, str(model_dir), runs_dir=not_a_folder)
    assert str(caught.value) == (
        f"runs dir {not_a_folder} is a file, not a folder; choose another with runs_dir= or "
        "DRAGONFARM_RUNS_DIR (or dragon.set_runs_dir())."
    )
    with pytest.raises(NotADirectoryError, match=f"is inside {re.escape(str(not_a_folder))}"):
        dragon.train(ds, str(model_dir), runs_dir=not_a_folder / "runs")
    with pytest.raises(NotADirectoryError, match="choose another run_dir="):
        dragon.train(ds, str(model_dir), run_dir=not_a_folder / "mine")
    assert not_a_folder.read_text() == "notes" and list(runs_root.iterdir()) == []


def test_a_model_path_that_is_a_file_says_what_a_model_folder_holds(tmp_path):
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0::/root:/bin/sh\n")
    with pytest.raises(ModelError) as caught:
        resolve_model(str(passwd))
    message = str(caught.value)
    assert message.startswith(
        f"{passwd} is a file, not a model folder or a Hugging Face model id (owner/name)."
    )
    assert "config.json, the weights (*.safetensors) and the tokenizer files" in message
    assert "a folder but not a model" not in message
