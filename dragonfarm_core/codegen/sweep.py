"""`code(sweep)`: the Python that declares a sweep's base run and search again and starts it.

    print(dragon.code(s))        # s: a Sweep, its id, or its record

Written from the record alone through the pieces every code panel shares: the dataset line,
`spec = dragon.RunSpec(...)` with the settings that differ from the recommended ones, then
`dragon.sweep(spec, space, ...)` with only the arguments that differ from its defaults. A
judge's key is only ever named by its environment variable. `compare_sweep_code`: the Python
behind the Compare tab's sweep view (its trials, their runs side by side, Optuna's two plots).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from dragonfarm_core.codegen import run as codegen
from dragonfarm_core.data.codegen import literal, portable
from dragonfarm_core.methods import METHODS
from dragonfarm_core.rundir import sweep_record
from dragonfarm_core.spec import RunSpec
from dragonfarm_core.sweeps.space import SweepError, full_name


def _short(name: str, method: str) -> str:
    """A setting's field name where it names it alone, else its full name."""
    field = name.split(".", 1)[1]
    try:
        return field if full_name(field, method) == name else name
    except SweepError:
        return name


def _method_args(spec: RunSpec) -> str | None:
    """`method_args=dragon.DpoArgs(beta=0.2)` where they differ from the method's defaults."""
    group = METHODS[spec.method].settings
    given = spec.method_args_dict()
    if group is None or not given:
        return None
    defaults = {f.name: f.default for f in dataclasses.fields(group)
                if f.default is not dataclasses.MISSING}  # fmt: skip
    parts = [f"rewards={codegen.rewards_code(v)}" if k == "rewards" else f"{k}={literal(v) if isinstance(v, str) else repr(v)}"
             for k, v in given.items() if v != defaults.get(k)]  # fmt: skip
    name = type(spec.method_args).__name__
    return f"method_args=dragon.{name}({', '.join(parts)})" if parts else None


def spec_lines(spec: RunSpec) -> tuple[list[str], str]:
    """The head (import, dataset, parent run) and `spec = dragon.RunSpec(...)`."""
    head, model = codegen.head_lines(spec.dataset_dict(), spec.model)
    args = [literal(spec.method), "ds", model, *codegen.group_arguments(spec)]
    made = _method_args(spec)
    if made:
        args.append(made)
    args += codegen.model_arguments(spec, model)
    call = "".join(f"    {a},\n" for a in args)
    return head, f"spec = dragon.RunSpec(\n{call})"


def _space(space: dict[str, Any], method: str) -> str:
    lines = []
    for name, values in space.items():
        if isinstance(values, dict):
            parts = [f'"low": {values["low"]!r}', f'"high": {values["high"]!r}']
            if values.get("log"):
                parts.append('"log": True')
            if values.get("step") is not None:
                parts.append(f'"step": {values["step"]!r}')
            shown = "{" + ", ".join(parts) + "}"
        else:
            shown = "[" + ", ".join(literal(v) if isinstance(v, str) else repr(v)
                                    for v in values) + "]"  # fmt: skip
        lines.append(f"    {literal(_short(name, method))}: {shown},")
    return "space = {\n" + "\n".join(lines) + "\n}"


def sweep_code(path: Path) -> str:
    """The script that declares and starts the sweep whose record is at `path`."""
    record = sweep_record.read(path)
    try:
        spec = RunSpec.from_dict(record["base"])
        head, spec_line = spec_lines(spec)
        space = _space(record["space"], spec.method)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"{path}: the sweep cannot be written as code ({e}); the record was "
                         "edited by hand? Declare the sweep again.") from None  # fmt: skip
    args = ["spec", "space"]
    all_lists = all(isinstance(v, list) for v in record["space"].values())
    if record["sampler"] != ("grid" if all_lists else "tpe"):
        args.append(f"sampler={literal(record['sampler'])}")
    grid = 1
    for values in record["space"].values():
        grid *= len(values) if isinstance(values, list) else 0
    if not (record["sampler"] == "grid" and record["n_trials"] == grid):
        args.append(f"n_trials={int(record['n_trials'])}")
    if record["objective"] != "eval_loss":
        args.append(f"objective={literal(record['objective'])}")
    judge = record.get("judge")
    if judge is not None:
        made = literal(judge) if isinstance(judge, str) else codegen.llm_call(judge, judge=True)
        args.append(f"judge={made}")
    from dragonfarm_core.sweeps.space import check_prune

    if record["prune"] != check_prune(None, record["objective"]):
        args.append(f"prune={bool(record['prune'])}")
    if record["seed"] != 42:
        args.append(f"seed={int(record['seed'])}")
    if record.get("name", "sweep") != "sweep":
        args.append(f"name={literal(record['name'])}")
    home = codegen.home_argument(Path(path).parent.parent)
    if home:
        args.append(f"runs_dir={literal(home)}")
    body = [spec_line, space, f"s = dragon.sweep({', '.join(args)})", "s.wait()",
            "print(s.trials)", "best = s.best_run"]  # fmt: skip
    return portable("\n".join([*head, "", *body, ""]))


def compare_sweep_code(record: dict[str, Any], study_db: str, home: str | None) -> str:
    """The Python behind the Compare tab's sweep: its trials, their runs side by side, and
    the two plots from its study."""
    sweep_id = literal(record["id"])
    where = f", runs_dir={literal(home)}" if home else ""
    return "\n".join([
        "import optuna",
        "import dragonfarm_core as dragon",
        "",
        f"s = dragon.open_sweep({sweep_id}{where})",
        f"print(s.trials)  # ranked on the page by {record['objective']}, the best marked",
        "print(dragon.compare(s))  # the trials' runs side by side",
        f"study = optuna.load_study(storage={literal('sqlite:///' + study_db)}, "
        f"study_name={sweep_id})",
        "optuna.visualization.plot_param_importances(",
        "    study, evaluator=optuna.importance.PedAnovaImportanceEvaluator()",
        ").show()",
        "optuna.visualization.plot_parallel_coordinate(study).show()",
        "",
    ])  # fmt: skip
