"""The Train tab's sweep form: which settings to vary (each with its values or a range), the
sampler, how many trials, the objective, whether to prune, the seed, and the judge (asked about
each trial's replies when the objective is a judge's); and its values read back into
`dragon.sweep`'s arguments.

A setting row is a picker (the settings a sweep of the method can vary,
`sweeps.space.setting_names`), a comma-separated list of values, or a range (low, high, log
scale). The text is read by the setting's declared type (a rank is a whole number, a
learning rate a number, gradient checkpointing true or false), so what reaches `dragon.sweep`
is what a person would write in Python; whether the values suit the run is `dragon.sweep`'s to
say (`SweepError`, before anything is queued).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gradio as gr

import dragonfarm_core as dragon
from dragonfarm_core.sweeps.space import JUDGE_OBJECTIVES, SAMPLERS, objectives, setting_names
from ui import llm_form

ROWS = 3  # settings a sweep from the page can vary at once (a grid of 3 already grows fast)
NONE = ""  # a row that varies nothing
# What a new page offers: the search, learning rate and LoRA rank, a 3 x 2 grid.
FIRST_ROWS = (("args.learning_rate", "1e-4, 3e-4, 1e-3"), ("lora.r", "8, 16"), (NONE, ""))
SAMPLER_LABELS = {"grid": "Grid (every combination)", "random": "Random",
                  "tpe": "TPE (learns from the trials so far)"}  # fmt: skip
TRUE, FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")
# dragon.sweep's prune: None (where the objective is logged while training), True, False.
PRUNE = {"auto": None, "on": True, "off": False}
PRUNE_LABELS = {"auto": "Automatic (where the objective is logged while training)",
                "on": "On", "off": "Off (every trial trains to its end)"}  # fmt: skip
SEED = 42  # dragon.sweep's default


def setting_choices(method: str) -> list[tuple[str, str]]:
    """The settings a sweep of `method` can vary, as (label, full name), after "none"."""
    picks = [("(none)", NONE)]
    for full, (_, field, cls) in setting_names(method).items():
        (f,) = [f for f in dataclasses.fields(cls) if f.name == field]
        label = f.metadata.get("label", field)
        picks.append((label if f"({field})" in label else f"{label} ({field})", full))
    return picks


def objective_choices(spec: dragon.RunSpec) -> list[str]:
    """The figures a sweep of `spec` can optimize: those its method produces, each built-in
    task metric (measured on every trial's samples after it trains), then the judge's (the
    judge below asked about every trial)."""
    return [*objectives(spec), *(f"metric_{m}" for m in dragon.metrics()), *JUDGE_OBJECTIVES]


def read_judge(objective: str, judge: Mapping[str, Any], runs_dir: Path) -> Any:
    """The judge form's judge for a judge objective (an LLM, or a local model's name); None for
    any other objective, whatever the form holds."""
    if objective not in JUDGE_OBJECTIVES:
        return None
    return llm_form.make_llm(**judge, role="judge", runs_dir=runs_dir, judge=True)


def _kind(full: str, method: str) -> Any:
    """The setting's declared type, without None (`int | None` is int)."""
    _, field, cls = setting_names(method)[full]
    hint = typing.get_type_hints(cls)[field]
    kinds = [k for k in typing.get_args(hint) or (hint,) if k is not type(None)]
    return kinds[0] if len(kinds) == 1 else hint


def _number(text: str, whole: bool, where: str) -> int | float:
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        kind = "a whole number" if whole else "a number"
        raise dragon.SweepError(f"{where}: {text!r} is not {kind}.") from None
    if whole:
        if not value.is_integer():
            raise dragon.SweepError(f"{where}: {text!r} is not a whole number.")
        return int(value)
    return value


def parse_value(text: str, full: str, method: str) -> Any:
    """One value of the list, as the setting's type reads it."""
    kind, where = _kind(full, method), full.split(".", 1)[1]
    if kind is bool:
        if text.lower() not in TRUE + FALSE:
            raise dragon.SweepError(f"{where}: {text!r} is not true or false.")
        return text.lower() in TRUE
    if kind is int or kind is float:
        return _number(text, kind is int, where)
    return text


def read_row(row: Mapping[str, Any], method: str) -> Any:
    """A row's values (a list) or range (a dict), refused with the fix when it has neither,
    or both."""
    full, name = row["setting"], str(row["setting"]).split(".", 1)[-1]
    values = [v.strip() for v in str(row.get("values") or "").split(",") if v.strip()]
    low, high = (str(row.get(k) or "").strip() for k in ("low", "high"))
    if values and (low or high):
        raise dragon.SweepError(f"{name}: give its values or a range (low, high), not both.")
    if values:
        return [parse_value(v, full, method) for v in values]
    if not low or not high:
        raise dragon.SweepError(f"{name}: list its values (e.g. 1e-4, 3e-4) or give a range's "
                                "low and high.")  # fmt: skip
    whole = _kind(full, method) is int
    ends = {k: _number(t, whole, name) for k, t in (("low", low), ("high", high))}
    return {**ends, "log": bool(row.get("log"))}


def read_space(rows: Mapping[str, Mapping[str, Any]], method: str) -> dict[str, Any]:
    """The rows with a setting picked -> `dragon.sweep`'s space (full names)."""
    space: dict[str, Any] = {}
    for row in rows.values():
        full = row.get("setting") or NONE
        if full == NONE:
            continue
        if full not in setting_names(method):
            raise dragon.SweepError(f"A {method} run has no setting {full!r} to vary; pick one "
                                    "from the list.")  # fmt: skip
        if full in space:
            raise dragon.SweepError(f"{full.split('.', 1)[1]} is picked twice; vary each "
                                    "setting in one row.")  # fmt: skip
        space[full] = read_row(row, method)
    if not space:
        raise dragon.SweepError("Pick at least one setting to vary, with its values or range.")
    return space


def read_trials(text: Any) -> int | None:
    """The trials box: empty is None (a grid tries every point); else a whole number, which
    `dragon.sweep` checks (0 is refused there, with the fix)."""
    text = str(text or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise dragon.SweepError(f"Trials is {text!r}; enter a whole number such as 8, or leave "
                                "it empty for a whole grid.") from None  # fmt: skip
    if not value.is_integer():
        raise dragon.SweepError(f"Trials is {text!r}; enter a whole number such as 8.")
    return int(value)


def read_prune(choice: Any) -> bool | None:
    """The Prune choice -> `dragon.sweep`'s prune (an unknown choice is automatic)."""
    return PRUNE.get(str(choice or "auto"))


def read_seed(text: Any) -> int:
    """The seed box: empty is the default (42); else a whole number."""
    text = str(text if text is not None else "").strip()
    if not text:
        return SEED
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value.is_integer():
        raise dragon.SweepError(f"Seed is {text!r}; enter a whole number such as {SEED} (the "
                                "same seed samples the same trials again).")  # fmt: skip
    return int(value)


def row_widgets(index: int, method: str) -> dict[str, Any]:
    """One setting row: the picker, its values, or a range."""
    setting, values = FIRST_ROWS[index] if index < len(FIRST_ROWS) else (NONE, "")
    with gr.Row():
        w = {
            "setting": gr.Dropdown(setting_choices(method), value=setting, scale=3,
                                   label=f"Setting {index + 1}", elem_id=f"sweep-setting-{index}"),
            "values": gr.Textbox(values, label="Values (comma-separated)", scale=3,
                                 placeholder="1e-4, 3e-4, 1e-3", max_lines=1,
                                 elem_id=f"sweep-values-{index}"),
            "low": gr.Textbox(label="or a range: low", placeholder="1e-5", max_lines=1,
                              scale=1, elem_id=f"sweep-low-{index}"),
            "high": gr.Textbox(label="high", placeholder="1e-3", max_lines=1, scale=1,
                               elem_id=f"sweep-high-{index}"),
            "log": gr.Checkbox(label="log scale", scale=1, elem_id=f"sweep-log-{index}"),
        }  # fmt: skip
    return w


def form_widgets(method: str, runs_dir: Path | None = None) -> dict[str, Any]:
    """The sweep form, by name: rows {"0": {...}, ...}, sampler, trials, objective, prune,
    seed, judge (the judge form's widgets; with `runs_dir`, its measured agreement beside it)."""
    rows = {str(i): row_widgets(i, method) for i in range(ROWS)}
    with gr.Row():
        sampler = gr.Radio(
            [(SAMPLER_LABELS[s], s) for s in SAMPLERS],
            value="grid",
            label="Sampler",
            scale=3,
            elem_id="sweep-sampler",
            info="A grid needs listed values; random and TPE take ranges too.",
        )
        trials = gr.Textbox(
            label="Trials",
            placeholder="empty: the whole grid",
            max_lines=1,
            scale=1,
            elem_id="sweep-count",
            info="How many runs to train (random and TPE need a number).",
        )
        objective = gr.Dropdown(["eval_loss"], value="eval_loss", allow_custom_value=True,
                                label="Objective", scale=2, elem_id="sweep-objective",
                                info="The figure to optimize; better is lower or higher as "
                                "in Compare.")  # fmt: skip
    with gr.Row():
        prune = gr.Radio([(label, key) for key, label in PRUNE_LABELS.items()], value="auto",
                         label="Stop clearly worse trials early (the median pruner)", scale=3,
                         elem_id="sweep-prune",
                         info="A pruned trial is a cancelled run that keeps its checkpoint.")  # fmt: skip
        seed = gr.Textbox(str(SEED), label="Seed", max_lines=1, scale=1, elem_id="sweep-seed",
                          info="Random and TPE pick the same trials for the same seed.")  # fmt: skip
    with gr.Accordion(f"Judge (asked about each trial when the objective is "
                      f"{' or '.join(JUDGE_OBJECTIVES)})", open=False,
                      elem_id="sweep-judge-box"):  # fmt: skip
        judge = llm_form.llm_form("sweep-judge", "judge", runs_dir=runs_dir)
    return {"rows": rows, "sampler": sampler, "trials": trials, "objective": objective,
            "prune": prune, "seed": seed, "judge": judge.form}  # fmt: skip


def follow_method(method: str, pickers: Mapping[str, str]) -> list[Any]:
    """The method changed -> each row's picker (`pickers`: their values by row) with the
    method's settings, a setting it lacks cleared."""
    picks = setting_choices(method)
    known = {value for _, value in picks}
    return [gr.update(choices=picks, value=c if c in known else NONE) for c in pickers.values()]
