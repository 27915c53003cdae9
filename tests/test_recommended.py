"""Settings that fit the model (dragon.recommended): what train(), prefer(), reinforce(), RunSpec,
pipelines, the command line and the code panel use when a person sets nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

import dragonfarm_core as dragon
from dragonfarm_core.codegen.run import spec_code
from dragonfarm_core.methods import METHODS
from dragonfarm_core.rundir import files
from dragonfarm_core.settings import Lora, TrainArgs

BUNDLED = dragon.BUNDLED_MODEL_ID


@pytest.fixture
def tickets() -> dragon.Dataset:
    return dragon.dataset(dragon.example_data()).map(prompt="{subject}", response="reply")


@pytest.mark.parametrize("method", list(METHODS))
def test_the_bundled_model_has_its_own_and_other_models_the_manuals(method):
    bundled = dragon.recommended(BUNDLED, method)
    assert bundled.source == "bundled"
    assert bundled.args.learning_rate > METHODS[method].default_args.learning_rate
    for alias in ("bundled", "tiny-support"):
        assert dragon.recommended(alias, method) == bundled
    preset = dragon.recommended("Qwen/Qwen2.5-0.5B-Instruct", method)
    assert (preset.args, preset.lora, preset.source) == (
        METHODS[method].default_args,
        Lora(),
        "preset",
    )
    assert dragon.recommended("someone/else", method).source == "manual"


def test_an_unknown_method_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="method='ppo' is not one of sft, dpo, orpo, grpo"):
        dragon.recommended(BUNDLED, "ppo")


def test_a_spec_with_nothing_set_takes_the_recommendation_and_given_settings_stay(tickets):
    fits = dragon.recommended(BUNDLED)
    spec = dragon.RunSpec("sft", tickets, BUNDLED)
    assert (spec.args, spec.lora) == (fits.args, fits.lora)
    mine = dragon.RunSpec("sft", tickets, BUNDLED, args=TrainArgs(), lora=Lora(r=4))
    assert mine.args == TrainArgs() and mine.lora.r == 4
    other = dragon.RunSpec("sft", tickets, "Qwen/Qwen2.5-0.5B-Instruct")
    assert other.args == TrainArgs()


def test_a_continued_run_follows_its_base_model(tmp_path: Path, tickets):
    first, second = tmp_path / "20260101-000000-a", tmp_path / "20260101-000001-b"
    for folder, model in ((first, BUNDLED), (second, str(first))):
        folder.mkdir()
        spec = dragon.RunSpec("sft", tickets, BUNDLED).to_dict()
        files.write_config(folder, {**spec, "schema": 1, "model": {"name": model}})
    assert dragon.recommended(str(second), "dpo") == dragon.recommended(BUNDLED, "dpo")
    loop = tmp_path / "20260101-000002-loop"  # a config naming itself: no hang, no guess
    loop.mkdir()
    files.write_config(loop, {**spec, "schema": 1, "model": {"name": str(loop)}})
    assert dragon.recommended(str(loop)).source == "manual"


def test_the_code_leaves_out_what_the_recommendation_fills_in(tickets):
    code = spec_code(dragon.RunSpec("sft", tickets, BUNDLED))
    assert "args=" not in code and "lora=" not in code
    # The manual's defaults on the bundled model must be written out, or the code would
    # train with the recommendation instead.
    code = spec_code(dragon.RunSpec("sft", tickets, BUNDLED, args=TrainArgs()))
    assert "args=dragon.TrainArgs()," in code
    changed = dragon.recommended(BUNDLED).args
    code = spec_code(dragon.RunSpec("sft", tickets, BUNDLED, args=TrainArgs(
        **{**changed.__dict__, "epochs": 2})))  # fmt: skip
    assert "epochs=2" in code and "learning_rate=0.005" in code  # every field, not just one
    namespace: dict = {}
    exec(code.replace("run = dragon.train(", "spec = dragon.RunSpec('sft', "), namespace)
    assert namespace["spec"].args.epochs == 2 and namespace["spec"].args.learning_rate == 0.005


def test_presets_list_each_models_recommendation():
    table = dragon.presets().set_index("id")
    assert table.loc[BUNDLED, "learning_rate"] == dragon.recommended(BUNDLED).args.learning_rate
    assert table.loc["Qwen/Qwen2.5-0.5B-Instruct", "learning_rate"] == 2e-4
