"""Train tab handlers: widgets from the settings dataclasses and back, the code preview, Start.

Trainer processes run tests/fake_trainer.py (DRAGONFARM_TRAINER_MODULE), so a run takes well
under a second and needs no model weights.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Iterator
from pathlib import Path

import gradio as gr
import pandas as pd
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.models import ResolvedModel
from dragonfarm_core.runs import files, launch, location
from dragonfarm_core.settings import Hardware, Lora, SettingsError, TrainArgs
from ui import present
from ui.tabs import train

TESTS_DIR = Path(__file__).resolve().parents[1]
SKIP = gr.skip()


@pytest.fixture
def runs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A runs folder whose trainers are the fake one; none outlives the test."""
    monkeypatch.setenv("DRAGONFARM_TRAINER_MODULE", "fake_trainer")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])
    )
    for knob in ("STEPS", "STEP_S", "FAIL_AT"):
        monkeypatch.delenv(f"FAKE_TRAINER_{knob}", raising=False)
    monkeypatch.delenv(location.ENV_VAR, raising=False)
    monkeypatch.setattr(location, "_configured", None)
    root = tmp_path / "runs"
    root.mkdir()
    yield root
    for config in root.rglob(files.CONFIG):
        status = files.read_status(config.parent)
        if launch.process_alive(status):
            os.killpg(status["pid"], 9)


@pytest.fixture
def model(tmp_path: Path) -> ResolvedModel:
    folder = tmp_path / "models" / "Tiny-Model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return ResolvedModel(str(folder), str(folder), None)


@pytest.fixture
def mapped(tmp_path: Path) -> dragon.Dataset:
    rows = [{"question": f"Device {i} reboots", "answer": f"Reset it ({i})."} for i in range(24)]
    pd.DataFrame(rows).to_csv(tmp_path / "tickets.csv", index=False)
    return dragon.dataset(tmp_path / "tickets.csv").map(prompt="question", response="answer")


@functools.cache
def _defaults() -> tuple:
    with gr.Blocks():
        widgets = [w for cls in train.SETTINGS for w in train.settings_widgets(cls)]
    return tuple(w.value for w in widgets)


def default_values() -> list:
    """What the widgets hold before anyone touches them."""
    return list(_defaults())


def with_values(**changes) -> list:
    values = default_values()
    names = [f.name for cls in train.SETTINGS for f in train.shown_fields(cls)]
    for name, value in changes.items():
        values[names.index(name)] = value
    return values


def test_widgets_come_from_the_dataclass_fields():
    with gr.Blocks():
        widgets = {cls: train.settings_widgets(cls) for cls in train.SETTINGS}
    for cls, made in widgets.items():
        fields = train.shown_fields(cls)
        assert [w.label for w in made] == [f.metadata["label"] for f in fields]
        for widget, field in zip(made, fields, strict=True):
            assert widget.info.startswith(field.metadata["help"])
            assert widget.elem_id == f"train-{cls.__name__.lower()}-{field.name}"
    by_name = {w.elem_id.rsplit("-", 1)[1]: w for ws in widgets.values() for w in ws}
    rank = by_name["r"]
    assert isinstance(rank, gr.Number) and rank.info.endswith("(1 to 512)")
    assert by_name["seed"].info.endswith("(0 to 4,294,967,295)")
    assert rank.precision == 0 and rank.value == Lora().r
    assert by_name["learning_rate"].precision is None
    assert by_name["max_steps"].value is None  # optional: empty means all epochs
    assert isinstance(by_name["device"], gr.Dropdown)
    assert [c[1] for c in by_name["device"].choices] == ["auto", "cuda", "mps", "cpu"]
    assert isinstance(by_name["gradient_checkpointing"], gr.Checkbox)
    assert isinstance(by_name["target_modules"], gr.Textbox)
    assert "extra" not in by_name


def test_widget_values_turn_back_into_the_dataclasses():
    assert train.read_settings(default_values()) == (Lora(), TrainArgs(), Hardware())
    values = with_values(
        r=8, target_modules="q_proj, v_proj", max_steps=40, batch_size=2, device="cpu"
    )
    lora, args, hardware = train.read_settings(values)
    assert lora == Lora(r=8, target_modules=("q_proj", "v_proj"))
    assert args == TrainArgs(max_steps=40, batch_size=2)
    assert hardware == Hardware(device="cpu")
    # Gradio sends an emptied number box as 0: for the optional max_steps that is "no limit".
    assert train.read_settings(with_values(max_steps=0))[1].max_steps is None


def test_bad_values_are_refused_naming_the_field():
    with pytest.raises(SettingsError, match=r"TrainArgs.epochs \(Epochs\) is empty"):
        train.read_settings(with_values(epochs=None))
    with pytest.raises(SettingsError, match="Lora.dropout = 0.95 is above the maximum"):
        train.read_settings(with_values(dropout=0.95))
    with pytest.raises(SettingsError, match="load_in_4bit needs an NVIDIA GPU"):
        train.read_settings(with_values(load_in_4bit=True, device="cpu"))


def test_code_preview_needs_data_and_shows_changed_settings(mapped, model, runs_dir: Path):
    hint, error = train.preview_code(
        None, model, "sft", "", "", *default_values(), runs_dir=runs_dir
    )
    assert hint == train.CODE_HINT and error == ""
    values = with_values(max_steps=40, batch_size=2, r=8)
    code, error = train.preview_code(mapped, model, "sft", "", "faq", *values, runs_dir=runs_dir)
    assert error == ""
    assert "lora=dragon.Lora(r=8)" in code
    assert "args=dragon.TrainArgs(batch_size=2, max_steps=40)" in code
    assert 'name="faq"' in code and f'runs_dir="{runs_dir}"' in code
    code, error = train.preview_code(
        mapped, model, "sft", "", "", *with_values(r=0), runs_dir=runs_dir
    )
    assert code == SKIP and "Lora.r = 0 is below the minimum 1" in error


def test_start_returns_at_once_and_selects_the_run(mapped, model, runs_dir: Path):
    values = with_values(max_steps=6, batch_size=2, logging_steps=1)
    preview, _ = train.preview_code(mapped, model, "sft", "", "", *values, runs_dir=runs_dir)
    selected, started, code, error = train.start(
        mapped, model, "sft", "", "", *values, runs_dir=runs_dir
    )
    assert error == ""
    run = dragon.open_run(selected)
    assert run.dir.parent == runs_dir and run.id in started
    assert run.config["args"]["max_steps"] == 6 and run.config["args"]["batch_size"] == 2
    assert code == present.portable_code(dragon.code(run))
    assert preview == code  # the code shown before Start is the code of the run it starts
    assert run.wait(timeout=30).state == "succeeded"


def test_start_continues_from_a_succeeded_run(mapped, model, runs_dir: Path):
    first = dragon.train(mapped, model.name, runs_dir=runs_dir, wait=True)
    choices = train.parent_choices(runs_dir)
    assert choices[0] == (train.NO_PARENT, "") and choices[1][1] == str(first.dir)
    selected, _, code, error = train.start(
        mapped, model, "sft", str(first.dir), "round-2", *default_values(), runs_dir=runs_dir
    )
    assert error == ""
    child = dragon.open_run(selected)
    assert child.config["continued_from"] == str(first.dir) and child.name == "round-2"
    assert f'parent = dragon.open_run("{first.dir}")' in code
    child.wait(timeout=30)


def test_start_refusals_are_shown_and_select_nothing(mapped, model, runs_dir: Path):
    with pytest.warns(UserWarning):
        out = train.start(None, model, "sft", "", "", *default_values(), runs_dir=runs_dir)
    assert out[:3] == (SKIP,) * 3 and "Mapping tab" in out[3]
    pairs = dragon.dataset(mapped.frame).map_pairs("question", "answer", "answer")
    with pytest.warns(UserWarning):
        out = train.start(pairs, model, "sft", "", "", *default_values(), runs_dir=runs_dir)
    assert out[0] == SKIP and "sft trains on a dataset mapped with .map(" in out[3]
    with pytest.warns(UserWarning):
        out = train.start(
            mapped, model, "sft", "", "", *with_values(epochs=None), runs_dir=runs_dir
        )
    assert "TrainArgs.epochs (Epochs) is empty" in out[3]
    assert dragon.runs(runs_dir).empty


def test_the_parent_picker_reads_only_when_runs_changed(mapped, model, runs_dir: Path):
    update, seen = train.refresh_parents(runs_dir, None, "")
    assert update["choices"] == [(train.NO_PARENT, "")] and update["value"] == ""
    assert train.refresh_parents(runs_dir, seen, "") == (SKIP, SKIP)


def test_method_choices_hold_sft_only_for_now():
    assert [value for _, value in train.METHODS] == ["sft"]
    with pytest.raises(ValueError, match="not available"):
        train.launch("dpo", None, None, (Lora(), TrainArgs(), Hardware()), None, Path("."))
    assert dataclasses.is_dataclass(TrainArgs)
