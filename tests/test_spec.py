"""RunSpec: validated in __post_init__ with the field named, and round-tripped through
config.json: `spec == RunSpec.from_dict(spec.to_dict())` for any spec (a property test), and
read back from a config.json that `rundir.create` wrote, as `code(run)` and `resume` read it."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dragonfarm_core as dragon
from dragonfarm_core.method_args import GrpoArgs, PreferenceArgs
from dragonfarm_core.methods import METHODS
from dragonfarm_core.rundir import create, files
from dragonfarm_core.rundir.train_config import SCHEDULERS
from dragonfarm_core.settings import Hardware, Lora, SettingsError, TrainArgs, to_dict
from dragonfarm_core.spec import RunSpec

IDENTIFIER = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
REVISIONS = st.none() | IDENTIFIER
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)


def _finite(lo: float, hi: float) -> st.SearchStrategy[float]:
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


LORAS = st.builds(
    Lora,
    r=st.integers(1, 512),
    alpha=_finite(1, 4096),
    dropout=_finite(0, 0.9),
    target_modules=st.one_of(st.just("auto"), st.lists(IDENTIFIER, min_size=1, max_size=3)),
)
HARDWARE = st.one_of(
    st.builds(Hardware, device=st.sampled_from(("auto", "cuda", "mps", "cpu")),
              dtype=st.sampled_from(("auto", "bfloat16", "float16", "float32"))),
    st.builds(Hardware, device=st.sampled_from(("auto", "cuda")), load_in_4bit=st.just(True)),
)  # fmt: skip
REWARDS = st.lists(
    st.one_of(
        st.builds(dragon.reward, st.just("regex"), pattern=st.sampled_from(("^T-", r"\d+", "ok"))),
        st.builds(dragon.reward, st.just("length"), max_chars=st.integers(1, 500),
                  weight=_finite(0, 5)),
        st.builds(dragon.reward, st.just("keyword"), words=st.lists(IDENTIFIER, min_size=1,
                                                                    max_size=3)),
        st.builds(dragon.reward, st.sampled_from(("numeric", "exact", "contains", "json"))),
    ),
    min_size=1,
    max_size=4,
)  # fmt: skip


@st.composite
def train_args(draw: st.DrawFn) -> TrainArgs:
    extra = draw(st.fixed_dictionaries({}, optional={
        "lr_scheduler_type": st.sampled_from(SCHEDULERS), "eval_steps": st.integers(1, 100),
        "max_grad_norm": _finite(0, 10)}))  # fmt: skip
    return TrainArgs(
        epochs=draw(_finite(0.01, 1000)), learning_rate=draw(_finite(1e-8, 1.0)),
        batch_size=draw(st.integers(1, 64)), grad_accum=draw(st.integers(1, 64)),
        max_seq_len=draw(st.integers(16, 4096)), max_steps=draw(st.none() | st.integers(1, 10**6)),
        warmup_ratio=draw(_finite(0, 0.5)), gradient_checkpointing=draw(st.booleans()),
        seed=draw(st.integers(0, 2**32 - 1)), **extra,
    )  # fmt: skip


@st.composite
def method_args(draw: st.DrawFn, method: str, args: TrainArgs) -> PreferenceArgs | GrpoArgs | None:
    group = METHODS[method].settings
    if group is PreferenceArgs:
        return draw(st.none() | st.builds(PreferenceArgs, _finite(1e-6, 100)))
    if group is GrpoArgs:
        return GrpoArgs(
            rewards=draw(REWARDS), group_size=draw(st.integers(2, 64)),
            beta=draw(_finite(0, 10)), temperature=draw(_finite(0.05, 5)),
            max_new_tokens=draw(st.integers(1, min(8192, args.max_seq_len - 1))),
        )  # fmt: skip
    return None


def dataset_specs(kind: str) -> st.SearchStrategy[dict]:
    """Dataset.spec() dicts, as config.json stores them."""
    return st.fixed_dictionaries({
        "source": st.none() | TEXT, "format": st.sampled_from(("csv", "jsonl", None)),
        "name": TEXT, "mapping": st.fixed_dictionaries({"kind": st.just(kind), "prompt": TEXT}),
        "eval_frac": _finite(0, 0.5), "seed": st.integers(0, 99), "split_set": st.booleans(),
        "n_rows": st.integers(1, 10**6),
    })  # fmt: skip


@st.composite
def run_specs(draw: st.DrawFn, dataset=None, model=None, revisions=REVISIONS) -> RunSpec:
    method = draw(st.sampled_from(list(METHODS)))
    args = draw(st.none() | train_args())
    given_args = args or METHODS[method].default_args
    return RunSpec(
        method,
        dataset(method) if dataset else draw(dataset_specs(METHODS[method].mapping_kinds[0])),
        model if model is not None else draw(TEXT),
        lora=draw(LORAS), args=args, hardware=draw(HARDWARE),
        method_args=draw(method_args(method, given_args)),
        name=draw(st.none() | TEXT.filter(str.strip)), n_samples=draw(st.integers(0, 50)),
        revision=draw(revisions), trust_remote_code=draw(st.booleans()),
    )  # fmt: skip


@given(run_specs())
@settings(max_examples=150, deadline=None)
def test_a_spec_round_trips_through_its_dict_and_json(spec):
    assert RunSpec.from_dict(spec.to_dict()) == spec
    assert RunSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    again = RunSpec.from_dict(spec.to_dict())
    assert (again.method, again.lora, again.args, again.hardware, again.method_args) == (
        spec.method, spec.lora, spec.args, spec.hardware, spec.method_args)  # fmt: skip


def test_specs_that_differ_are_not_equal():
    spec = RunSpec("dpo", {"source": "a.csv"}, "m")
    assert spec != RunSpec("dpo", {"source": "a.csv"}, "m", method_args=PreferenceArgs(0.2))
    assert spec != RunSpec("orpo", {"source": "a.csv"}, "m")
    assert spec != RunSpec("dpo", {"source": "b.csv"}, "m")
    assert spec == RunSpec("dpo", {"source": "a.csv"}, "m", args=METHODS["dpo"].default_args)


# ---- through a config.json written by rundir.create ---------------------------------------


def _frame() -> pd.DataFrame:
    return pd.DataFrame({
        "q": [f"What is {i} + {i}?" for i in range(12)], "a": [str(2 * i) for i in range(12)],
        "bad": ["no idea"] * 12,
    })  # fmt: skip


def _mapped(path: Path, method: str) -> dragon.Dataset:
    ds = dragon.dataset(path)
    kind = METHODS[method].mapping_kinds[0]
    if kind == "pairs":
        return ds.map_pairs(prompt="q", chosen="a", rejected="bad")
    if kind == "prompts":
        return ds.map_prompts(prompt="q", reference="a")
    return ds.map(prompt="q", response="a")


@given(data=st.data())
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_a_spec_reads_back_from_the_config_json_create_writes(data, model_dir, tmp_path):
    table = tmp_path / "table.csv"
    _frame().to_csv(table, index=False)
    # A local model folder has no revisions to pick.
    spec = data.draw(run_specs(dataset=lambda method: _mapped(table, method),
                               model=str(model_dir), revisions=st.none()))  # fmt: skip
    with tempfile.TemporaryDirectory() as runs:
        path = create.write_run(spec, runs_dir=runs)
        config = files.read_config(path)
        assert RunSpec.from_dict(config, run_dir=path) == spec
        assert {"schema", "id", "created_at", "continued_from", "data"} <= config.keys()
        assert config["data"]["kind"] == spec.row.data_kind


def test_a_custom_reward_file_is_copied_and_read_back_from_the_copy(model_dir, tmp_path):
    table = tmp_path / "table.csv"
    _frame().to_csv(table, index=False)
    scorer = tmp_path / "scorer.py"
    scorer.write_text("def reward(prompt, completion, reference, row):\n    return 1.0\n")
    rewards = [dragon.reward("custom", file=str(scorer), name="mine")]
    spec = RunSpec("grpo", _mapped(table, "grpo"), str(model_dir),
                   method_args=GrpoArgs(rewards=rewards))  # fmt: skip
    path = create.write_run(spec, runs_dir=tmp_path / "runs")
    (stored,) = files.read_config(path)["method_args"]["rewards"]
    assert stored["file"] == "rewards/mine.py"  # relative: the run folder can move
    (back,) = RunSpec.from_dict(files.read_config(path), run_dir=path).method_args.rewards
    assert back["file"] == str(path / "rewards" / "mine.py")


def test_an_existing_config_reads_back_as_its_spec(runs_root, model_dir, tmp_path):
    """A config.json as runs before the spec wrote it (prefer() with beta, default name)."""
    config = {
        "schema": 1, "id": "20260101-000000-tiny-model", "name": "tiny-model", "method": "dpo",
        "created_at": "2026-01-01T00:00:00Z",
        "model": {"name": "org/Tiny-Model", "base": "/models/tiny", "revision": "v2",
                  "trust_remote_code": False, "adapters": []},
        "continued_from": None,
        "dataset": {"source": "/data/pairs.csv", "format": "csv", "name": "pairs",
                    "mapping": {"kind": "pairs", "prompt": "q", "chosen": "a", "rejected": "b"}},
        "data": {"kind": "pairs", "n_train": 20, "n_eval": 1},
        "lora": {"r": 8, "alpha": 32, "dropout": 0.05, "target_modules": ["q_proj"]},
        "args": to_dict(TrainArgs(learning_rate=5e-5, epochs=2)),
        "hardware": {"device": "cpu", "dtype": "auto", "load_in_4bit": False},
        "n_samples": 3, "method_args": {"beta": 0.25},
    }  # fmt: skip
    spec = RunSpec.from_dict(config)
    assert spec == RunSpec(
        "dpo", config["dataset"], "org/Tiny-Model", lora=Lora(r=8, target_modules=["q_proj"]),
        hardware=Hardware(device="cpu"), method_args=PreferenceArgs(0.25), n_samples=3,
        revision="v2",
    )  # fmt: skip
    assert spec.name is None and spec.args == METHODS["dpo"].default_args


def _prompts() -> dragon.Dataset:
    return dragon.dataset(_frame()).map_prompts(prompt="q", reference="a")


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"method": "ppo"}, ValueError, "method='ppo' is not one of sft, dpo, orpo, grpo"),
        ({"lora": {"r": 8}}, SettingsError, "RunSpec.lora must be dragon.Lora(...), got dict"),
        ({"args": Lora()}, SettingsError, "RunSpec.args must be dragon.TrainArgs(...)"),
        ({"hardware": "cpu"}, SettingsError, "RunSpec.hardware must be dragon.Hardware(...)"),
        ({"model": 3}, TypeError, "RunSpec.model must be a model id"),
        ({"name": " "}, ValueError, "RunSpec.name must be a non-empty string"),
        ({"n_samples": -1}, ValueError, "RunSpec.n_samples must be a whole number >= 0"),
        ({"n_samples": True}, ValueError, "RunSpec.n_samples"),
        ({"revision": 2}, ValueError, "RunSpec.revision"),
        ({"trust_remote_code": "yes"}, SettingsError, "RunSpec.trust_remote_code"),
        ({"method_args": PreferenceArgs()}, SettingsError, "RunSpec.method_args must be "
         "dragon.GrpoArgs(...) for grpo"),
        ({"method_args": None}, SettingsError, "RunSpec.method_args: GRPO needs its rewards"),
        ({"args": TrainArgs(warmup_steps=3)}, SettingsError, "unknown key(s) 'warmup_steps'"),
        ({"args": TrainArgs(hub_token="hf_x")}, SettingsError, "TrainArgs.extra['hub_token'] "
         "looks like a credential"),
        ({"args": TrainArgs(max_seq_len=64)}, SettingsError, "TrainArgs.max_seq_len (64) must "
         "leave room"),
        ({"dataset": "tickets.csv"}, TypeError, "dataset must be a dragon.dataset(...) mapped "
         "with .map_prompts("),
        ({"dataset": dragon.dataset(_frame())}, ValueError, "it is not mapped"),
        ({"dataset": dragon.dataset(_frame()).map_prompts(prompt="q")}, ValueError,
         "'numeric' compare completions with a reference"),
    ],
)  # fmt: skip
def test_bad_settings_are_refused_naming_the_field(change, error, message):
    good = {
        "method": "grpo",
        "dataset": _prompts(),
        "model": "m",
        "args": TrainArgs(),
        "method_args": GrpoArgs(rewards=[dragon.reward("numeric")], max_new_tokens=100),
    }
    with pytest.raises(error, match=re.escape(message)):
        RunSpec(**(good | change))
    assert RunSpec(**good).row is METHODS["grpo"]


def test_sft_takes_no_method_args_and_preference_takes_its_default():
    with pytest.raises(SettingsError, match="RunSpec.method_args: sft takes none"):
        RunSpec("sft", {}, "m", method_args=PreferenceArgs())
    assert RunSpec("orpo", {}, "m").method_args == PreferenceArgs(beta=0.1)
    with pytest.raises(SettingsError, match=r"PreferenceArgs.beta must be a number > 0"):
        PreferenceArgs(0)
    with pytest.raises(SettingsError, match=r"method_args has unknown key\(s\) 'gamma'"):
        RunSpec.from_dict(RunSpec("dpo", {}, "m").to_dict() | {"method_args": {"gamma": 1}})


def test_the_default_name_reads_back_as_none():
    spec = RunSpec("sft", {}, "org/Tiny-Model", name="tiny-model")
    assert spec.name is None  # config.json writes the default name: it cannot tell them apart
    assert RunSpec("sft", {}, "org/Tiny-Model", name="Tiny Model").name == "Tiny Model"
