"""`dragon.dataset` takes what users of the Hugging Face stack already hold: a `datasets.Dataset`,
one split of a `DatasetDict`, and a Hub dataset id fetched with `datasets.load_dataset`, here
from a local server that answers as the Hub does (tests/data/hub_datasets_fake.py). The Hub
calls run in a child process, because huggingface_hub reads HF_ENDPOINT when it is imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import datasets
import pandas as pd
import pytest
from hub_datasets_fake import FakeDatasetHub

import dragonfarm_core as dragon
from dragonfarm_core.data.codegen import dataset_code
from dragonfarm_core.data.errors import DatasetError

ROOT = Path(__file__).resolve().parents[2]
CSV = b"question,answer\nWhere is my order?,It ships today.\nCan I return it?,Within 30 days.\n"

CHILD = """
import json, sys
import dragonfarm_core as dragon
from dragonfarm_core.data.codegen import dataset_code
try:
    ds = dragon.dataset(sys.argv[1], **json.loads(sys.argv[2]))
except dragon.DatasetError as e:
    print(json.dumps({"error": str(e)}))
else:
    print(json.dumps({"rows": ds.frame.to_dict(orient="records"), "spec": ds.spec(),
                      "code": dataset_code(ds.spec())}))
"""


def from_hub(hub_url: str, home: Path, repo: str, offline: bool = False, **kwargs: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(HF_ENDPOINT=hub_url, HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1")
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, repo, json.dumps(kwargs)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def hub():
    with FakeDatasetHub({"shop/tickets": {"train.csv": CSV}}) as fake:
        yield fake


def test_a_hub_dataset_is_fetched_and_its_code_fetches_it_again(hub, tmp_path: Path):
    got = from_hub(hub.url, tmp_path / "hf", "shop/tickets", split="train")
    assert got["rows"] == [
        {"question": "Where is my order?", "answer": "It ships today."},
        {"question": "Can I return it?", "answer": "Within 30 days."},
    ]
    spec = got["spec"]
    assert (spec["source"], spec["format"], spec["hub_split"], spec["name"]) == (
        "shop/tickets", "hub", "train", "tickets")  # fmt: skip
    assert got["code"] == 'ds = dragon.dataset("shop/tickets", split="train")'
    assert any("/resolve/" in path and path.endswith("/train.csv") for _, path in hub.requests)


@pytest.mark.slow
def test_a_missing_hub_dataset_or_no_network_says_so_and_offers_a_file(hub, tmp_path: Path):
    missing = from_hub(hub.url, tmp_path / "hf", "shop/nothing-here")
    offline = from_hub(hub.url, tmp_path / "hf2", "shop/tickets", offline=True)
    for got, repo in ((missing, "shop/nothing-here"), (offline, "shop/tickets")):
        error = got["error"]
        assert f"Could not fetch the Hub dataset '{repo}' (split 'train')" in error
        assert "dragon.dataset('data.csv')" in error and "to_csv" in error


def test_a_datasets_dataset_and_one_split_of_a_datasetdict_are_read():
    frame = pd.DataFrame({"q": ["a?", "b?"], "n": [1, 2]})
    one = datasets.Dataset.from_pandas(frame, preserve_index=False)
    ds = dragon.dataset(one, name="mine")
    assert ds.frame.to_dict(orient="records") == [{"q": "a?", "n": "1"}, {"q": "b?", "n": "2"}]
    assert (ds.name, ds.format, ds.source) == ("mine", "datasets", None)
    both = datasets.DatasetDict({"train": one, "test": one.select([1])})
    assert dragon.dataset(both, split="test").frame["q"].tolist() == ["b?"]
    assert len(dragon.dataset(datasets.DatasetDict({"train": one}))) == 2  # one split: no need
    with pytest.raises(DatasetError, match=r"splits 'train', 'test': say which with split="):
        dragon.dataset(both)
    with pytest.raises(DatasetError, match=r"no split 'dev'; it has 'train', 'test'"):
        dragon.dataset(both, split="dev")
    with pytest.raises(DatasetError, match="format= is for files"):
        dragon.dataset(one, format="csv")


def test_a_dataset_trained_on_is_saved_with_the_run_so_its_code_rebuilds_it(tmp_path: Path):
    one = datasets.Dataset.from_dict({"p": ["x"] * 30, "r": ["y"] * 30})
    ds = dragon.dataset(one).map(prompt="p", response="r")
    spec = ds.spec()
    assert spec["source"] is None and "hub_split" not in spec
    assert dataset_code(spec).startswith("# `df`: the pandas DataFrame")


def test_split_is_refused_for_a_file_and_a_missing_file_is_not_taken_for_a_hub_id(tmp_path):
    data = tmp_path / "t.csv"
    data.write_bytes(CSV)
    with pytest.raises(DatasetError, match="split= is for a datasets.DatasetDict"):
        dragon.dataset(data, split="train")
    with pytest.raises(DatasetError) as missing:
        dragon.dataset("shop/tickets.csv")  # a path with a data file's extension: the file error
    assert "Hub" not in str(missing.value)
