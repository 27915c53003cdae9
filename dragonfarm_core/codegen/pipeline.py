"""`code(pipeline)`: the Python that declares a pipeline's steps again and starts it.

    print(dragon.code(p))        # p: a Pipeline, its id, or its record

Written from the record alone, through the pieces every code panel shares (`codegen`: the
dataset lines, settings calls, rewards and language-model expressions): one variable per
distinct dataset (ds, ds2, ...) and per distinct judge (judge, judge2, ...), then the steps
with only the settings that differ from the step's defaults, then the `dragon.pipeline(...)`
call. A key is only ever named by its environment variable.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

from dragonfarm_core.codegen import run as codegen
from dragonfarm_core.data.codegen import dataset_code, literal, portable
from dragonfarm_core.pipelines.steps import KINDS
from dragonfarm_core.rundir import pipeline_record as record_io
from dragonfarm_core.settings import Lora, TrainArgs


class _Names:
    """Variables for the values the steps share: the same dataset or judge, one name."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, str] = {}

    def name(self, base: str, value: Any, make: Any) -> str:
        key = json.dumps([base, value], sort_keys=True, default=str)
        if key not in self.names:
            count = sum(n.rstrip("0123456789") == base for n in self.names.values())
            var = base if count == 0 else f"{base}{count + 1}"
            self.names[key] = var
            self.lines += make(var)
        return self.names[key]


def _judge_lines(var: str, judge: dict[str, Any]) -> list[str]:
    if judge.get("provider") == "function":
        name = codegen.comment_value(judge.get("model"))
        return [f"# `{var}`: the Python function {name} (prompts -> answers)."]
    return [f"{var} = {codegen.llm_call(judge, judge=True)}"]


def _argument(key: str, value: Any, names: _Names) -> str:
    """One step argument as source: variables for datasets and judges, calls for settings."""
    if key in ("dataset", "prompts") and isinstance(value, dict):
        return names.name("ds", value, lambda v: dataset_code(value, var=v).splitlines())
    if key == "judge" and isinstance(value, dict):
        return names.name("judge", value, lambda v: _judge_lines(v, value))
    if key == "lora":
        return codegen.settings_call(Lora, value) or "dragon.Lora()"
    if key == "args":
        return codegen.settings_call(TrainArgs, value) or "dragon.TrainArgs()"
    if key == "rewards":
        return codegen.rewards_code(value)
    return literal(value) if isinstance(value, str | int | float) and not isinstance(
        value, bool) else repr(value)  # fmt: skip


def _step_call(spec: dict[str, Any], names: _Names) -> str:
    kind = spec["kind"]
    parameters = inspect.signature(KINDS[kind]).parameters
    parts = []
    for key, parameter in parameters.items():
        required = parameter.default is inspect.Parameter.empty  # positional: they come first
        if key not in spec:
            if required:
                raise ValueError(f"it has no {key!r}, which a {kind} step needs")
            continue  # not in the record (one written by hand): the step's default
        value = spec[key]
        if not required and value == parameter.default:
            continue
        text = _argument(key, value, names)
        parts.append(text if required else f"{key}={text}")
    return f"dragon.steps.{kind}({', '.join(parts)})"


def _step_code(path: Path, index: int, entry: Any, names: _Names) -> str:
    """One step's call, or a ValueError that names the step and what is wrong with it: the
    record may have been edited by hand, and only quoted values ever reach the code."""
    spec = entry.get("spec") if isinstance(entry, dict) else None
    kind = spec.get("kind") if isinstance(spec, dict) else None
    where = f"{path}: step {index + 1}"
    if not isinstance(spec, dict) or not isinstance(kind, str) or kind not in KINDS:
        shown = f"kind {kind!r}" if isinstance(spec, dict) else "no step spec"
        raise ValueError(
            f"{where} has {shown}; a step is one of {', '.join(KINDS)}. The record was edited "
            "by hand? Put the step back as dragon.steps wrote it, or declare the pipeline again."
        )
    try:
        return _step_call(spec, names)
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        # A value of the wrong shape (a list where settings go ...): say where, not a traceback.
        raise ValueError(f"{where} ({kind}) cannot be written as code: {e}") from None


def pipeline_code(path: Path) -> str:
    """The script that declares and starts the pipeline whose record is at `path`."""
    record = record_io.read(path)
    names = _Names()
    calls = [_step_code(path, i, entry, names) for i, entry in enumerate(record["steps"])]
    head = ["import dragonfarm_core as dragon", "", *names.lines]
    model = record.get("model")
    if not isinstance(model, str) or not isinstance(record.get("name", ""), str):
        raise ValueError(f"{path}: the record's model and name must be text; it was edited?")
    args = [literal(model), "steps"]
    if record.get("name", "pipeline") != "pipeline":
        args.append(f"name={literal(record['name'])}")
    home = codegen.home_argument(Path(path).parent.parent)
    if home:
        args.append(f"runs_dir={literal(home)}")
    if record.get("background"):
        args.append("background=True")
    body = ["steps = [", *(f"    {c}," for c in calls), "]",
            f"p = dragon.pipeline({', '.join(args)})",
            'print(dragon.pipeline_status(p)["status"])']  # fmt: skip
    return portable("\n".join([*head, "", *body, ""]))
