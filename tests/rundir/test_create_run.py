"""create_run: everything is validated before anything is written; then config.json (the
documented schema), the data files and a queued status."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from dragonfarm_core.data.conversations import conversations
from dragonfarm_core.data.dataset import dataset
from dragonfarm_core.models import ModelError
from dragonfarm_core.rewards import reward
from dragonfarm_core.rundir import create, files
from dragonfarm_core.rundir.create import create_run
from dragonfarm_core.rundir.run import Run
from dragonfarm_core.settings import Hardware, Lora, SettingsError, TrainArgs

CONFIG_KEYS = {
    "schema",
    "id",
    "name",
    "method",
    "created_at",
    "model",
    "continued_from",
    "dataset",
    "data",
    "lora",
    "args",
    "hardware",
    "n_samples",
    "method_args",
}


def test_writes_config_data_and_queued_status(runs_root, sft_data, model_dir):
    path = create_run(
        "sft",
        sft_data,
        str(model_dir),
        Lora(r=8),
        TrainArgs(epochs=1),
        Hardware(device="cpu"),
        runs_dir=runs_root,
        n_samples=3,
    )
    assert path.parent == runs_root.resolve()
    assert re.fullmatch(r"\d{8}-\d{6}-tiny-model", path.name)
    config = files.read_config(path)
    assert set(config) == CONFIG_KEYS
    assert config["id"] == path.name and config["method"] == "sft" and config["schema"] == 1
    assert config["model"] == {
        "name": str(model_dir),
        "base": str(model_dir.resolve()),
        "revision": None,
        "trust_remote_code": False,
        "adapters": [],
    }
    assert config["lora"]["r"] == 8 and config["args"]["epochs"] == 1
    assert config["hardware"]["device"] == "cpu" and config["n_samples"] == 3
    assert config["data"] == {"kind": "messages", "n_train": 23, "n_eval": 1}
    assert config["dataset"]["source"] == str(sft_data.source)
    train = files.read_jsonl(path / files.TRAIN_DATA)
    held_out = files.read_jsonl(path / files.EVAL_DATA)
    assert len(train) == 23 and len(held_out) == 1
    assert train[0]["messages"][-1]["role"] == "assistant"
    assert files.read_status(path)["state"] == "queued"


def test_ids_taken_in_the_same_second_get_a_suffix(runs_root, sft_data, model_dir, monkeypatch):
    monkeypatch.setattr(create.time, "strftime", lambda fmt: "20260914-101500")
    ids = [
        create_run("sft", sft_data, str(model_dir), name="Exp 1", runs_dir=runs_root).name
        for _ in range(3)
    ]
    assert ids == ["20260914-101500-exp-1", "20260914-101500-exp-1-2", "20260914-101500-exp-1-3"]
    assert files.read_config(runs_root / ids[1])["name"] == "Exp 1"


def test_a_dataframe_dataset_is_saved_with_the_run(runs_root, model_dir):
    frame = pd.DataFrame(
        {
            "q": [f"question {i}" for i in range(5)],
            "a": [f"answer {i}" for i in range(5)],
            "note": ["x"] * 5,
        }
    )
    ds = dataset(frame).map(prompt="q", response="a")
    path = create_run("sft", ds, str(model_dir), runs_dir=runs_root)
    spec = files.read_config(path)["dataset"]
    assert spec["source"] == str(path / files.SOURCE_DATA) and spec["format"] == "jsonl"
    assert files.read_jsonl(path / files.SOURCE_DATA) == frame.to_dict(orient="records")
    rebuilt = dataset(spec["source"], format="jsonl").map(prompt="q", response="a")
    assert rebuilt.records() == ds.records()


def test_a_list_of_conversations_is_saved_as_messages_rows(runs_root, model_dir):
    convs = [
        [{"role": "user", "content": f"hi {i}"}, {"role": "assistant", "content": "hello"}]
        for i in range(3)
    ]
    path = create_run("sft", conversations(convs), str(model_dir), runs_dir=runs_root)
    spec = files.read_config(path)["dataset"]
    assert files.read_jsonl(spec["source"]) == [{"messages": c} for c in convs]
    assert conversations(spec["source"]).records() == conversations(convs).records()


def _pairs():
    frame = pd.DataFrame({"p": ["q1", "q2", "q3"], "c": ["good"] * 3, "r": ["bad"] * 3})
    return dataset(frame).map_pairs(prompt="p", chosen="c", rejected="r")


def _prompts():
    return dataset(pd.DataFrame({"p": ["2+2?", "3+3?"], "ref": ["4", "6"]})).map_prompts(
        prompt="p", reference="ref"
    )


REGEX = reward("regex", pattern="[0-9]").to_dict()
GRPO_ARGS = {"rewards": [REGEX], "group_size": 4, "beta": 0.1, "temperature": 1.0,
             "max_new_tokens": 128, "loss_type": "dapo", "scale_rewards": "group"}  # fmt: skip


@pytest.mark.parametrize(
    ("method", "make", "kind", "method_args"),
    [("dpo", _pairs, "pairs", {"beta": 0.1, "loss_type": "hinge", "label_smoothing": 0.0}),
     ("orpo", _pairs, "pairs", {"beta": 0.1}),
     ("grpo", _prompts, "prompts", GRPO_ARGS)],
)  # fmt: skip
def test_each_method_takes_its_mapping(runs_root, model_dir, method, make, kind, method_args):
    path = create_run(method, make(), str(model_dir), runs_dir=runs_root, method_args=method_args)
    config = files.read_config(path)
    assert config["data"]["kind"] == kind and config["method_args"] == method_args


def _refusals(tmp_path, sft_data, model_dir):
    unmapped = dataset(pd.DataFrame({"q": ["a"], "a": ["b"]}))
    no_model = tmp_path / "empty-folder"
    no_model.mkdir()
    return [
        (dict(method="dpo"), ValueError, "map_pairs"),
        (dict(dataset=_prompts()), ValueError, "mapped as 'prompts'"),
        (dict(dataset=unmapped), ValueError, "not mapped"),
        (dict(dataset="tickets.csv"), TypeError, "dragon.dataset"),
        (dict(method="ppo"), ValueError, "sft, dpo, orpo, grpo"),
        (dict(lora={"r": 8}), SettingsError, "lora must be dragon.Lora"),
        (dict(args=Lora()), SettingsError, "args must be dragon.TrainArgs"),
        (dict(hardware="cpu"), SettingsError, "hardware must be dragon.Hardware"),
        (dict(model=str(no_model)), ModelError, "no config.json"),
        (dict(model="not a model name"), ModelError, "neither a local folder"),
        (dict(n_samples=-1), ValueError, "n_samples"),
        (dict(name=""), ValueError, "name must be"),
        (dict(method_args={"api_key": "sk-123"}), SettingsError, "credential"),
        (dict(args=TrainArgs(hub_token="hf_abc")), SettingsError, "credential"),
        (dict(method_args={"fn": print}), SettingsError, "plain JSON"),
        (dict(trust_remote_code="yes"), SettingsError, "trust_remote_code"),
    ]


def test_refusals_write_nothing(runs_root, tmp_path, sft_data, model_dir):
    for change, error, words in _refusals(tmp_path, sft_data, model_dir):
        kwargs = dict(
            method="sft", dataset=sft_data, model=str(model_dir), runs_dir=runs_root, run_dir=None
        )
        kwargs.update(change)
        with pytest.raises(error, match=re.escape(words)):
            create_run(**kwargs)
        assert list(runs_root.iterdir()) == [], f"{change} left files behind"


def test_run_dir_must_not_be_a_run_or_hold_files(runs_root, sft_data, model_dir, tmp_path):
    first = create_run("sft", sft_data, str(model_dir), run_dir=tmp_path / "mine")
    assert first == (tmp_path / "mine").resolve() and files.read_config(first)["id"] == "mine"
    with pytest.raises(FileExistsError, match="already a run"):
        create_run("sft", sft_data, str(model_dir), run_dir=first)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not an empty folder"):
        create_run("sft", sft_data, str(model_dir), run_dir=busy)
    assert sorted(p.name for p in busy.iterdir()) == ["notes.txt"]


def _finish(path):
    """Make a created run look succeeded, with an adapter, as a trainer would leave it."""
    files.adapter_dir(path).mkdir()
    files.update_status(path, state="succeeded")
    return Run(path)


def test_continuing_from_runs_stacks_their_adapters(runs_root, sft_data, model_dir):
    parent = _finish(create_run("sft", sft_data, str(model_dir), runs_dir=runs_root))
    child = _finish(create_run("sft", sft_data, parent, runs_dir=runs_root))
    grandchild = create_run("sft", sft_data, str(child.dir), runs_dir=runs_root)
    config = files.read_config(grandchild)
    assert config["continued_from"] == str(child.dir)
    assert config["model"]["base"] == str(model_dir.resolve())
    assert config["model"]["name"] == str(model_dir)
    assert config["model"]["adapters"] == [str(parent.dir / "adapter"), str(child.dir / "adapter")]


def test_an_unfinished_parent_is_refused(runs_root, sft_data, model_dir):
    parent = Run(create_run("sft", sft_data, str(model_dir), runs_dir=runs_root))
    with pytest.raises(ValueError, match="is queued; only a succeeded run can be continued"):
        create_run("sft", sft_data, parent, runs_dir=runs_root)
    files.update_status(parent.dir, state="failed")
    with pytest.raises(ValueError, match="is failed"):
        create_run("sft", sft_data, str(parent.dir), runs_dir=runs_root)
    with pytest.raises(ValueError, match="revision"):
        create_run("sft", sft_data, _finish(parent.dir), revision="main", runs_dir=runs_root)
    assert len(list(runs_root.iterdir())) == 1
