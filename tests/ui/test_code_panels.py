"""Every code panel shows Python that runs as shown and rebuilds what the tab did."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pandas as pd

import dragonfarm_core as dragon
from ui.tabs import data, mapping, model


def run_snippet(code: str) -> dict:
    """exec the snippet in a fresh namespace, as a person pasting it would; returns its globals."""
    namespace: dict = {"__name__": "__snippet__"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(code, "<code panel>", "exec"), namespace)
    return namespace


def slots(**values: str) -> dict[str, str]:
    return {name: values.get(name, "") for name in mapping.SLOTS}


def test_data_panel_code_runs(qa_csv: Path, uploads_dir: Path):
    ds = data.load_upload(str(qa_csv), dragon.ResolvedModel.bundled(), None, uploads_dir, 10)[0]
    rebuilt = run_snippet(data.data_code(ds, dragon.ResolvedModel.bundled()))["ds"]
    assert rebuilt.source == ds.source and rebuilt.frame.equals(ds.frame)


def test_example_data_panel_code_runs():
    code = data.load_example(dragon.ResolvedModel.bundled(), None)[4]
    assert run_snippet(code)["ds"].source == dragon.example_data()


def test_mapping_panel_code_runs_for_each_kind(qa_csv: Path, chat_model, tmp_path: Path):
    qa = dragon.dataset(qa_csv)
    cases = [
        (qa, "sft", slots(prompt="{question} ({topic})", response="answer", system="Be kind.")),
        (qa, "prompts", slots(prompt="question", reference="answer")),
        (qa, "pairs", slots(prompt="question", chosen="answer", rejected="topic")),
    ]
    conv = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    table = tmp_path / "convs.csv"
    pd.DataFrame({"turns": [json.dumps(conv)]}).to_csv(table, index=False)
    cases.append((dragon.dataset(table), "conversations", slots(messages="turns")))
    for ds, kind, values in cases:
        mapped, _html, _report, code, error = mapping.remap(ds, chat_model, kind, values)
        assert error == "", error
        rebuilt = run_snippet(code)["ds"]
        assert rebuilt.mapping == mapped.mapping, kind
        assert rebuilt.rendered().records == mapped.rendered().records, kind


def test_model_panel_code_runs(chat_model):
    code = model.choose_model(chat_model.base, "", chat_model)[2]
    assert run_snippet(code)["model"].base == chat_model.base


def test_reports_count_tokens_with_the_models_tokenizer(qa_csv: Path, chat_model):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    tokenizer = Tokenizer(WordLevel({"[UNK]": 0, "reset": 1}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.save(str(Path(chat_model.base) / "tokenizer.json"))
    qa = dragon.dataset(qa_csv)
    _m, _html, report, code, error = mapping.remap(
        qa, chat_model, "sft", slots(prompt="question", response="answer")
    )
    assert error == "" and "estimated" not in report
    assert f'ds.report(tokenizer=dragon.resolve_model("{chat_model.name}").base)' in code
    run_snippet(code)
