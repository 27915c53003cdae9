"""spec() and dataset_code(): the generated code runs and rebuilds the same records."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import dragonfarm_core.data as dragon
from dragonfarm_core.data import conversations, dataset, dataset_code


def rebuild(ds, var: str = "ds"):
    """Execute the generated code, as a user pasting it would, and return the dataset."""
    spec = json.loads(json.dumps(ds.spec()))  # it must survive config.json
    namespace = {"dragon": dragon}
    exec(dataset_code(spec, var=var), namespace)
    return namespace[var]


def test_spec_holds_source_mapping_and_split(tickets_csv):
    ds = dataset(tickets_csv).map(prompt="{subject}\n\n{body}", response="reply").split(0.2, seed=3)
    assert ds.spec() == {
        "source": str(tickets_csv),
        "format": "csv",
        "name": "tickets",
        "mapping": {
            "kind": "sft",
            "prompt": "{subject}\n\n{body}",
            "response": "reply",
            "chosen": None,
            "rejected": None,
            "reference": None,
            "system": None,
        },
        "eval_frac": 0.2,
        "seed": 3,
        "split_set": True,
        "max_bytes": None,
        "n_rows": 25,
    }


def test_short_code_is_one_line_and_long_code_one_call_per_line(tickets_csv):
    ds = dataset(tickets_csv).map(prompt="{subject}\n\n{body}", response="reply")
    spec = {**ds.spec(), "source": "/data/tickets.csv"}
    assert dataset_code(spec) == (
        'ds = dragon.dataset("/data/tickets.csv").map(prompt="{subject}\\n\\n{body}", response="reply")'
    )
    source = "/data/" + "x" * 80 + "/tickets.csv"
    assert dataset_code({**spec, "source": source}).splitlines() == [
        "ds = (",
        f'    dragon.dataset("{source}")',
        '    .map(prompt="{subject}\\n\\n{body}", response="reply")',
        ")",
    ]
    assert rebuild(ds).records() == ds.records()


def test_round_trip_with_split_name_format_and_system(write):
    path = write("data.txt", "q,a b,sys\nx,1,s\ny,2,\n")
    ds = (
        dataset(path, format="csv", name="custom", max_bytes=10_000)
        .map(prompt="Q: {q}", response="a b", system='Say "hi" {{politely}}.')
        .split(eval_frac=0.5, seed=9)
    )
    code = dataset_code(ds.spec())
    assert code.startswith("ds = (\n    dragon.dataset(") and code.endswith("\n)")
    assert 'format="csv", name="custom", max_bytes=10000' in code
    assert ".split(eval_frac=0.5, seed=9)" in code
    again = rebuild(ds)
    assert again.records() == ds.records() and again.split_records() == ds.split_records()
    assert again.spec() == ds.spec()


@pytest.mark.parametrize("kind", ["pairs", "prompts"])
def test_round_trip_pairs_and_prompts(write, kind):
    path = write("p.jsonl", '{"q": "2+2?", "good": "4", "bad": "5", "id": "7"}\n')
    ds = dataset(path)
    ds = (
        ds.map_pairs("q", "good", "bad")
        if kind == "pairs"
        else ds.map_prompts("q", reference="good")
    )
    code = dataset_code(ds.spec(), var="data")
    assert code.startswith("data = ") and (".map_pairs(" in code) == (kind == "pairs")
    assert rebuild(ds, var="data").records() == ds.records()


def test_round_trip_conversations_file(write):
    chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    ds = conversations(write("c.jsonl", json.dumps({"messages": chat}) + "\n"), name="chats")
    code = dataset_code(ds.spec())
    assert code == f'ds = dragon.conversations("{ds.source}", name="chats")'
    assert rebuild(ds).records() == ds.records()


def test_in_memory_sources_say_what_to_provide():
    df = pd.DataFrame({"q": ["a"], "r": ["b"]})
    code = dataset_code(dataset(df).map(prompt="q", response="r").spec())
    assert code.splitlines()[0].startswith("# `df`: the pandas DataFrame")
    namespace = {"dragon": dragon, "df": df}
    exec(code, namespace)
    assert namespace["ds"].records() == [
        {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}
    ]
    chats = [[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]]
    code = dataset_code(conversations(chats).spec())
    assert code.endswith("ds = dragon.conversations(conversations)")


def test_bad_variable_name():
    with pytest.raises(ValueError, match="not a Python variable name"):
        dataset_code({"source": None, "mapping": None}, var="my ds")


def test_runs_dir_argument_is_left_out_for_the_configured_runs_dir(tmp_path):
    from dragonfarm_core.data.codegen import runs_dir_argument
    from dragonfarm_core.rundir import location

    other = tmp_path / "elsewhere"
    previous = location.set_runs_dir(tmp_path)
    try:
        assert runs_dir_argument(tmp_path) is None
        assert runs_dir_argument(other) == f"runs_dir={json.dumps(str(other))}"
    finally:
        location.set_runs_dir(previous)


def test_portable_code_names_the_example_file_by_its_function():
    from dragonfarm_core.data.codegen import literal, portable
    from dragonfarm_core.data.example import EXAMPLE_FILE

    code = f"ds = dragon.dataset({literal(str(EXAMPLE_FILE))})"
    assert portable(code) == "ds = dragon.dataset(dragon.example_data())"
    assert portable('dragon.dataset("/data/x.csv")') == 'dragon.dataset("/data/x.csv")'
