"""A pipeline's training steps go through one RunSpec: each step's settings default to its
method's (the method-args dataclasses), `run_spec` is the spec train()/prefer()/reinforce()
would build, and a record written before the steps built their own spec
(fixtures/old_record/record.json: written by `pipeline()`'s record code of that time, then
stopped before its first step; its absolute paths replaced by @ROOT@) still loads and resumes.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.method_args import GrpoArgs, PreferenceArgs, ReinforceArgs
from dragonfarm_core.pipelines.runner import steps_of
from dragonfarm_core.pipelines.steps import PreferStep, ReinforceStep, TrainingStep
from dragonfarm_core.rundir import files
from dragonfarm_core.spec import RunSpec

OLD_RECORD = Path(__file__).parent / "fixtures" / "old_record"


def defaults(cls: type) -> dict:
    return {f.name: f.default for f in dataclasses.fields(cls)}


def test_training_steps_take_their_methods_defaults(sft_data):
    reinforce, grpo = defaults(ReinforceStep), defaults(ReinforceArgs)
    for name in ("group_size", "beta", "temperature", "max_new_tokens"):
        assert reinforce[name] == grpo[name]
    assert defaults(PreferStep)["beta"] == defaults(PreferenceArgs)["beta"]
    assert defaults(TrainingStep)["n_samples"] == defaults(RunSpec)["n_samples"]
    rewards = [dragon.reward("length", max_chars=50)]
    assert dragon.steps.reinforce(sft_data, rewards).method_args() == GrpoArgs(rewards=rewards)
    assert dragon.steps.prefer().method_args() == dragon.DpoArgs()


def test_a_training_steps_spec_is_the_one_its_function_builds(model_dir, sft_data, pairs_data):
    prompts = dragon.dataset(sft_data.source).map_prompts(prompt="question", reference="answer")
    rewards = [dragon.reward("numeric"), dragon.reward("length", max_chars=80)]
    lora, args = dragon.Lora(r=8), dragon.TrainArgs(epochs=2)
    model = str(model_dir)
    train = dragon.steps.train(sft_data, lora=lora, args=args, n_samples=3)
    assert train.run_spec(model, "p-train") == RunSpec(
        "sft", sft_data, model, lora=lora, args=args, name="p-train", n_samples=3
    )
    orpo = dragon.steps.prefer(method="orpo", beta=0.3).run_spec(model, "p", pairs=pairs_data)
    assert orpo == RunSpec("orpo", pairs_data, model, method_args=PreferenceArgs(0.3), name="p")
    dpo = dragon.steps.prefer(pairs_data).run_spec(model, pairs=None)
    assert dpo == RunSpec("dpo", pairs_data, model) and dpo.method_args == dragon.DpoArgs()
    grpo = dragon.steps.reinforce(prompts, rewards, group_size=2, temperature=0.7)
    assert grpo.run_spec(model) == RunSpec(
        "grpo", prompts, model,
        method_args=GrpoArgs(rewards=rewards, group_size=2, temperature=0.7),
    )  # fmt: skip
    stored = dragon.steps.reinforce(prompts, rewards).to_dict()["rewards"]  # as a record holds them
    again = ReinforceStep(prompts, stored).run_spec(model)
    assert again.method_args == GrpoArgs(rewards=rewards)


def old_record(root: Path) -> Path:
    """The fixture record, its paths under `root`, in root/runs/pipelines/ (its model folder
    and datasets beside it); its path."""
    for name in ("tickets.csv", "pairs.csv"):
        shutil.copy(OLD_RECORD / name, root / name)
    model = root / "models" / "Tiny-Model"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    text = (OLD_RECORD / "record.json").read_text().replace("@ROOT@", str(root))
    folder = root / "runs" / files.PIPELINES_DIR / json.loads(text)["id"]
    folder.mkdir(parents=True)
    path = folder.with_suffix(".json")
    path.write_text(text)
    return path


def test_an_old_record_makes_the_same_steps_again(tmp_path):
    record = dragon.pipeline_status(old_record(tmp_path))
    steps = steps_of(record)
    assert [s.to_dict() for s in steps] == [entry["spec"] for entry in record["steps"]]
    assert [s.kind for s in steps] == ["train", "prefer", "prefer", "reinforce", "reinforce"]
    assert steps[3].group_size == 2 and steps[3].max_new_tokens == 16


@pytest.mark.filterwarnings("ignore:Run .* held no rows out")
@pytest.mark.slow
def test_an_old_record_resumes_and_its_steps_train_what_it_declares(tmp_path, runs_root):
    path = old_record(tmp_path)
    record = dragon.pipeline_status(path)
    assert (record["status"], record["steps"][0]["state"]) == ("cancelled", "pending")
    p = dragon.resume_pipeline(path.stem, runs_dir=tmp_path / "runs")
    final = p.status()
    assert final["status"] == "succeeded", final.get("error")
    runs = p.runs
    configs = [run.config for run in runs]
    assert [c["method"] for c in configs] == ["sft", "dpo", "orpo", "grpo", "grpo"]
    assert configs[0]["args"]["epochs"] == 2 and configs[0]["name"] == "old-record-train"
    assert configs[1]["method_args"] == dragon.DpoArgs().to_dict()
    assert configs[2]["method_args"] == {"beta": 0.3}
    grpo, plain = configs[3]["method_args"], configs[4]["method_args"]
    assert (grpo["group_size"], grpo["max_new_tokens"]) == (2, 16)
    assert [r["name"] for r in grpo["rewards"]] == ["numeric", "length"]
    assert grpo["rewards"][1]["max_chars"] == 80
    assert {k: v for k, v in plain.items() if k != "rewards"} == ReinforceArgs().to_dict()
    # Each run continues from the one before it, the first from the record's model.
    assert configs[0]["model"]["name"] == record["model"]
    assert [c["continued_from"] for c in configs[1:]] == [str(r.dir) for r in runs[:-1]]
