"""The method table: every fact in a row is true of the code it describes.

Each method's trainer module exists and defines main(run_dir), the entry point dispatches to it,
its mapping kinds are real Dataset mapping kinds whose records are the data kind it writes, its
curves and metrics are columns its trainer writes, its defaults are those of its public function.
The trainers are read as source (ast), so this needs no torch.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import inspect
from pathlib import Path

import pandas as pd
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.data.records import KINDS
from dragonfarm_core.methods import METHODS, PROGRESS_COLUMNS, method
from dragonfarm_core.settings import TrainArgs
from dragonfarm_core.trainers import evaluate_run
from dragonfarm_core.trainers.__main__ import trainer_module

TRAINERS = "dragonfarm_core.trainers"


def _tree(module: str) -> ast.Module:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, f"{module} does not exist"
    return ast.parse(Path(spec.origin).read_text())


def _closure(module: str) -> dict[str, ast.Module]:
    """The module and every trainers module it imports, transitively, by name."""
    trees: dict[str, ast.Module] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in trees:
            continue
        trees[name] = _tree(name)
        for node in ast.walk(trees[name]):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(TRAINERS):
                continue
            if node.module == TRAINERS:  # from dragonfarm_core.trainers import lifecycle, ...
                todo += [f"{TRAINERS}.{alias.name}" for alias in node.names]
            else:
                todo.append(node.module)
    return trees


def _written(module: str) -> set[str]:
    """Names a trainer can write: string constants (dict keys, column tuples) and keyword
    arguments (report.progress(loss=...)), plus f-string prefixes as 'prefix*'."""
    names: set[str] = set()
    for tree in _closure(module).values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value)
            elif isinstance(node, ast.keyword) and node.arg:
                names.add(node.arg)
            elif isinstance(node, ast.JoinedStr) and isinstance(node.values[0], ast.Constant):
                names.add(f"{node.values[0].value}*")
    return names


@pytest.mark.parametrize("name", list(METHODS))
def test_each_trainer_module_exists_defines_main_and_is_dispatched_to(name, monkeypatch):
    row = METHODS[name]
    assert row.name == name and row.trainer.startswith(f"{TRAINERS}.")
    mains = [n for n in _tree(row.trainer).body if isinstance(n, ast.FunctionDef)]
    assert "main" in [n.name for n in mains], f"{row.trainer} has no main(run_dir)"
    monkeypatch.delenv("DRAGONFARM_TRAINER_MODULE", raising=False)
    assert trainer_module({"method": name}) == row.trainer


@pytest.mark.parametrize("name", list(METHODS))
def test_curves_and_metrics_are_columns_its_trainer_writes(name):
    row, written = METHODS[name], _written(METHODS[name].trainer)
    # Every progress row has the common columns: RunReporter.progress (trainers.common) fills
    # them in; the method's own columns are its trainer's.
    assert f"{TRAINERS}.common" in _closure(row.trainer)
    written |= set(PROGRESS_COLUMNS)
    for column in [c for panel in row.curves for c in panel] + list(row.metrics):
        assert column in written, f"{name}: {column!r} is not written by {row.trainer}"
    assert all(panel for panel in row.curves) and row.curves[-1] == ("lr",)


def _mapped(kind: str) -> dragon.Dataset:
    frame = pd.DataFrame({"q": ["a", "b"], "r": ["x", "y"], "n": ["no", "no"]})
    talk = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    ds = dragon.dataset(frame)
    return {
        "sft": lambda: ds.map(prompt="q", response="r"),
        "conversations": lambda: dragon.conversations([talk, talk]),
        "pairs": lambda: ds.map_pairs(prompt="q", chosen="r", rejected="n"),
        "prompts": lambda: ds.map_prompts(prompt="q", reference="r"),
    }[kind]()


@pytest.mark.parametrize("name", list(METHODS))
def test_mapping_kinds_are_dataset_kinds_whose_records_are_its_data_kind(name):
    row = METHODS[name]
    assert row.mapping_kinds and set(row.mapping_kinds) <= set(KINDS)
    shape = {"messages": {"messages"}, "pairs": {"prompt", "chosen", "rejected"},
             "prompts": {"prompt", "reference"}}[row.data_kind]  # fmt: skip
    for kind in row.mapping_kinds:
        assert shape <= set(_mapped(kind).records()[0]), (name, kind)
    for word in row.mapping_hint.replace("(", " ").split():
        if word.startswith(".map"):
            assert callable(getattr(dragon.Dataset, word[1:])), word


@pytest.mark.parametrize("name", list(METHODS))
def test_defaults_and_settings_are_those_of_its_public_function(name):
    row = METHODS[name]
    assert isinstance(row.default_args, TrainArgs)
    function = getattr(dragon, row.function)
    parameters = inspect.signature(function).parameters
    # None: the settings recommended for the model, which are the method's defaults for a
    # model the project has no figures for (the manual's, as its public function has them).
    assert parameters["args"].default is None and parameters["lora"].default is None
    assert dragon.recommended("some/model", name).args == row.default_args
    shared = [m for m, r in METHODS.items() if r.function == row.function]
    if len(shared) > 1:  # one function starts several methods: it takes method=
        assert name in shared and "method" in parameters
    if row.settings is not None:  # its group's fields are the function's keywords
        for field in dataclasses.fields(row.settings):
            if field.name != "rewards":
                assert parameters[field.name].default == field.default, field.name


def test_recomputable_methods_are_those_the_evaluator_can_score():
    # evaluate_run measures held-out messages (loss) or pairs (preference accuracy); a GRPO
    # run's eval.json is its trainer's reward measurement and cannot be recomputed.
    kinds = {row.data_kind for row in METHODS.values() if row.recomputable}
    assert kinds <= {"messages", "pairs"} and hasattr(evaluate_run, "evaluate_pairs")
    assert hasattr(evaluate_run, "evaluate_messages") and not METHODS["grpo"].recomputable


def test_an_unknown_method_is_refused_listing_the_known_ones():
    with pytest.raises(ValueError, match="method='ppo' is not one of sft, dpo, orpo, grpo"):
        method("ppo")
    assert list(METHODS) == ["sft", "dpo", "orpo", "grpo"]
