"""The Train tab's settings follow the recommendation for the model and method (ui.train_defaults):
fields still at the old recommendation take the new one, typed values stay, the note says which
recommendation the fields hold, and the tab opens with the bundled model's."""

from __future__ import annotations

from pathlib import Path

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.methods import METHODS
from dragonfarm_core.models import ResolvedModel
from dragonfarm_core.rundir import files
from dragonfarm_core.settings import TrainArgs
from ui import layout, train_defaults
from ui.settings_form import shown_fields

SKIP = gr.skip()
NAMES = [f.name for cls in train_defaults.FOLLOWED for f in shown_fields(cls)]
BUNDLED = ResolvedModel.bundled()
QWEN = ResolvedModel("Qwen/Qwen2.5-0.5B-Instruct", "/nowhere/qwen", None)


def values(fits: dragon.Recommendation, **typed) -> dict:
    """The followed widgets' values by group and field name: the recommendation, some typed."""
    out = train_defaults.values_of(fits)
    for name, value in typed.items():
        out[next(group for group, fields in out.items() if name in fields)][name] = value
    return out


def follow(seen, model, method, vals, parent="", *, runs_dir: Path) -> dict:
    *updates, note, now = train_defaults.follow(seen, model, method, parent, vals,
                                                runs_dir=runs_dir)  # fmt: skip
    return {"updates": dict(zip(NAMES, updates, strict=True)), "note": note, "now": now}


def test_switching_method_takes_its_defaults_and_keeps_what_was_typed(tmp_path: Path):
    sft = dragon.recommended(QWEN.name, "sft")
    assert sft.args == TrainArgs() and sft.source == "preset"  # the manual's defaults
    got = follow((QWEN.name, "sft"), QWEN, "dpo", values(sft), runs_dir=tmp_path)
    assert got["updates"]["learning_rate"] == 5e-5 and got["updates"]["epochs"] == 2
    assert got["updates"]["batch_size"] == SKIP and got["updates"]["r"] == SKIP  # unchanged
    assert got["now"] == (QWEN.name, "dpo")
    typed = follow((QWEN.name, "sft"), QWEN, "grpo", values(sft, learning_rate=3e-4),
                   runs_dir=tmp_path)["updates"]  # fmt: skip
    assert typed["learning_rate"] == SKIP and typed["epochs"] == 1 and typed["save_steps"] == 20
    back = follow((QWEN.name, "grpo"), QWEN, "sft",
                  values(dragon.recommended(QWEN.name, "grpo")), runs_dir=tmp_path)  # fmt: skip
    assert back["updates"]["learning_rate"] == TrainArgs().learning_rate


def test_switching_model_moves_untouched_fields_to_its_recommendation(tmp_path: Path):
    bundled = dragon.recommended(BUNDLED.name)
    assert bundled.source == "bundled" and bundled.args.learning_rate > 10 * 2e-4
    got = follow((BUNDLED.name, "sft"), QWEN, "sft", values(bundled, epochs=5),
                 runs_dir=tmp_path)  # fmt: skip
    updates = got["updates"]
    assert updates["learning_rate"] == 2e-4 and updates["max_seq_len"] == 1024
    assert updates["grad_accum"] == 4 and updates["epochs"] == SKIP  # typed: it stays
    assert "manual's defaults" in got["note"]
    again = follow((QWEN.name, "sft"), BUNDLED, "sft", values(dragon.recommended(QWEN.name)),
                   runs_dir=tmp_path)  # fmt: skip
    assert again["updates"]["learning_rate"] == bundled.args.learning_rate
    assert "bundled model" in again["note"] and "learning rate 0.005" in again["note"]


def test_a_run_to_continue_from_brings_its_base_models_recommendation(tmp_path: Path):
    runs = tmp_path / "runs"
    parent = runs / "20260101-000000-parent"
    parent.mkdir(parents=True)
    spec = dragon.RunSpec("sft", dragon.dataset(dragon.example_data()).map(
        prompt="{subject}", response="reply"), BUNDLED.name)  # fmt: skip
    files.write_config(parent, {**spec.to_dict(), "schema": 1,
                                "model": {"name": BUNDLED.name}})  # fmt: skip
    assert train_defaults.target(QWEN, str(parent), runs) == str(parent)
    got = follow((QWEN.name, "sft"), QWEN, "sft", values(dragon.recommended(QWEN.name)),
                 parent=str(parent), runs_dir=runs)  # fmt: skip
    assert got["updates"]["learning_rate"] == dragon.recommended(BUNDLED.name).args.learning_rate
    # A run outside the runs dir is not read: the fields follow the model meanwhile.
    assert train_defaults.target(QWEN, str(tmp_path / "elsewhere"), runs) == QWEN.name


def test_the_tab_opens_with_the_bundled_models_recommendation(tmp_path: Path):
    app = layout.build_app(tmp_path / "runs")
    shown = {b.elem_id: b for b in app.blocks.values() if getattr(b, "elem_id", None)}
    fits = dragon.recommended(BUNDLED.name)
    assert shown["train-trainargs-learning_rate"].value == fits.args.learning_rate == 0.005
    assert shown["train-trainargs-epochs"].value == fits.args.epochs
    assert shown["train-trainargs-max_seq_len"].value == fits.args.max_seq_len
    assert "Recommended for the bundled model" in shown["train-recommended"].value
    assert METHODS["sft"].default_args.learning_rate == 2e-4  # the manual's, for other models
