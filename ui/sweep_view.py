"""How the app draws a sweep: its header line, its trials as they run (Train tab), its trials
ranked by the objective (Compare tab), Optuna's parameter-importance and parallel-coordinate
plots of its study, and the code of each.

The tables are pure functions of the sweep's record (`dragonfarm_core.rundir.sweep_record`),
so a reloaded page or a second browser draws the same; the plots take the Optuna study the
record's folder keeps (study.db), which the Compare tab loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go

import dragonfarm_core as dragon
from dragonfarm_core.codegen.run import home_argument
from dragonfarm_core.codegen.sweep import spec_lines
from dragonfarm_core.data.codegen import literal
from dragonfarm_core.sweeps.space import full_name
from ui import llm_form, present
from ui.pipeline_view import duration_s

STATE_MARKS = {"running": "▶", "complete": "✓", "pruned": "✂", "failed": "✗", "waiting": "·"}
ENDED = ("complete", "pruned", "failed")
BEST = "★"
ARROWS = {"minimize": "↓", "maximize": "↑"}
WAYS = {"minimize": "lower is better", "maximize": "higher is better"}
# After the complete trials, ranked: those still training, then those stopped early, then failed.
AFTER = ("running", "waiting", "pruned", "failed")
IMPORTANCE_NEEDS = 2  # complete trials: one alone says nothing about what mattered
ROUGH_BELOW = 10  # complete trials under which PED-ANOVA's importances swing from trial to trial
NO_PLOTS = "The plots appear once a trial completes."


def short(name: str) -> str:
    """`args.learning_rate` as the tables head it: learning_rate."""
    return name.split(".", 1)[-1]


def value_text(value: Any) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def ended(record: dict[str, Any]) -> int:
    return sum(t.get("state") in ENDED for t in record.get("trials") or [])


def best_trial(record: dict[str, Any]) -> dict[str, Any] | None:
    return next((t for t in record.get("trials") or [] if t["number"] == record.get("best")), None)


def state_text(trial: dict[str, Any]) -> str:
    """✓ complete, ▶ running, ✂ pruned at step 4, ✗ failed."""
    state = str(trial.get("state") or "?")
    text = f"{STATE_MARKS.get(state, '?')} {state}"
    if state == "pruned" and trial.get("pruned_at") is not None:
        text += f" at step {trial['pruned_at']}"
    return text


def _row(record: dict[str, Any], trial: dict[str, Any]) -> dict[str, Any]:
    params = trial.get("params") or {}
    value = value_text(trial.get("value"))
    if trial["number"] == record.get("best"):
        value = f"{BEST} {value}"
    error = str(trial.get("error") or "").splitlines()
    return {"trial": trial["number"], "state": state_text(trial),
            **{short(n): value_text(params.get(n)) for n in record["space"]},
            _objective_header(record): value, "step": value_text(trial.get("step")),
            "run": trial.get("run") or "", "note": error[0] if error else ""}  # fmt: skip


def _objective_header(record: dict[str, Any]) -> str:
    return f"{record['objective']} {ARROWS.get(str(record.get('direction')), '')}".rstrip()


def _columns(record: dict[str, Any]) -> list[str]:
    return ["trial", "state", *(short(n) for n in record["space"]), _objective_header(record),
            "step", "run", "note"]  # fmt: skip


def progress_table(record: dict[str, Any]) -> pd.DataFrame:
    """One row per trial in the order they started: its state, settings, value (the best
    marked), the step it reached, its run, and why it failed."""
    rows = [_row(record, t) for t in record.get("trials") or []]
    return pd.DataFrame(rows, columns=_columns(record))


def ranked(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The trials best first: the complete ones by the objective in the sweep's direction,
    then those still training, pruned, failed (each in trial order)."""
    trials = record.get("trials") or []
    done = [t for t in trials if t.get("state") == "complete" and t.get("value") is not None]
    done.sort(key=lambda t: t["value"], reverse=record.get("direction") == "maximize")
    rest = [t for t in trials if t not in done]
    rest.sort(key=lambda t: (AFTER.index(t["state"]) if t.get("state") in AFTER else len(AFTER),
                             t["number"]))  # fmt: skip
    return done + rest


def ranked_table(record: dict[str, Any]) -> pd.DataFrame:
    """`ranked`'s trials with their rank (the best marked), then as `progress_table`."""
    rows, rank = [], 0
    for trial in ranked(record):
        shown = ""
        if trial.get("state") == "complete" and trial.get("value") is not None:
            rank += 1
            shown = f"{BEST} {rank}" if trial["number"] == record.get("best") else str(rank)
        rows.append({"rank": shown, **_row(record, trial)})
    return pd.DataFrame(rows, columns=["rank", *_columns(record)])


def header_markdown(record: dict[str, Any], now: datetime | None = None) -> str:
    """**running** · sweep `<id>` · 2 of 6 trials done · eval_loss, lower is better · best
    1.23 (trial 1, run `<id>`) · 1 min 05 s; then its error and how to go on."""
    status = record.get("status") or "unknown"
    active = status in ("queued", "running")
    took = present.duration_text(duration_s(record, now if active else None))
    parts = [f"**{status}**", f"sweep `{record.get('id')}`",
             f"{ended(record)} of {record.get('n_trials')} trials done",
             f"{record.get('objective')}, {WAYS.get(str(record.get('direction')), '')}"]  # fmt: skip
    best = best_trial(record)
    if best is not None:
        run = f", run `{best['run']}`" if best.get("run") else ""
        parts.append(f"best {value_text(best.get('value'))} (trial {best['number']}{run})")
    if took:
        parts.append(took)
    lines = [" · ".join(parts)]
    if record.get("error"):
        lines.append(f"Error: {record['error']}")
    if status in ("failed", "cancelled"):
        lines.append("Resume goes on from the trial it was training, then the rest.")
    return "  \n".join(lines)


def choice_label(row: dict[str, Any]) -> str:
    """A `dragon.list_sweeps()` row as a picker shows it: "<id> (running, 2/6)"."""
    return f"{row.get('id')} ({row.get('status')}, {row.get('done')}/{row.get('trials')})"


def complete_trials(record: dict[str, Any]) -> int:
    return sum(t.get("state") == "complete" for t in record.get("trials") or [])


def _titled(fig: go.Figure, title: str) -> go.Figure:
    fig.update_layout(title=title, template="plotly_white", height=420,
                      margin={"l": 60, "r": 30, "t": 50, "b": 40})  # fmt: skip
    return fig


def study_figures(study: Any, record: dict[str, Any]) -> tuple[Any, Any, str]:
    """(importance figure or None, parallel-coordinate figure or None, a note on what is
    missing) from the sweep's Optuna study."""
    # optuna.visualization is imported on first use: the app starts without it. Optuna's
    # default importance (fANOVA) needs scikit-learn; PED-ANOVA needs nothing more.
    from optuna.importance import PedAnovaImportanceEvaluator
    from optuna.visualization import plot_parallel_coordinate, plot_param_importances

    complete = complete_trials(record)
    if complete == 0:
        return None, None, NO_PLOTS
    parallel = plot_parallel_coordinate(study, target_name=record["objective"])
    parallel = _titled(parallel, f"The trials' settings and {record['objective']}")
    if complete < IMPORTANCE_NEEDS:
        note = (f"Parameter importance needs {IMPORTANCE_NEEDS} complete trials; this sweep "
                f"has {complete}.")  # fmt: skip
        return None, parallel, note
    importance = plot_param_importances(study, evaluator=PedAnovaImportanceEvaluator(),
                                        target_name=record["objective"])  # fmt: skip
    importance = _titled(importance, f"What mattered for {record['objective']}")
    rough = (f"With {complete} complete trials the importances are a rough guide."
             if complete < ROUGH_BELOW else "")  # fmt: skip
    return importance, parallel, rough


def _space_code(space: Mapping[str, Any], method: str) -> str:
    """`space = {...}`, each setting by its field name where that names it alone."""
    lines = []
    for name, values in space.items():
        field = name.split(".", 1)[1]
        shown = field if full_name(field, method) == name else name
        lines.append(f"    {literal(shown)}: {values!r},")
    return "space = {\n" + "\n".join(lines) + "\n}"


def preview_code(spec: dragon.RunSpec, space: Mapping[str, Any], sampler: str,
                 n_trials: int | None, objective: str, name: str, runs_dir: Path,
                 prune: bool | None = None, seed: int = 42, judge: Any = None) -> str:  # fmt: skip
    """The script Start sweep runs: the base run's spec, the space, `dragon.sweep(...)`."""
    head, spec_line = spec_lines(spec)
    args = ["spec", "space"]
    if sampler != ("grid" if all(isinstance(v, list) for v in space.values()) else "tpe"):
        args.append(f"sampler={literal(sampler)}")  # dragon.sweep's default otherwise
    if n_trials is not None:
        args.append(f"n_trials={n_trials}")
    if objective != "eval_loss":
        args.append(f"objective={literal(objective)}")
    notes: list[str] = []
    if judge is not None:  # a key typed in the app is never shown: the notes say where it goes
        made, notes = llm_form.model_code(judge, judge=True)
        args.append(f"judge={made}")
    if prune is not None:
        args.append(f"prune={prune}")
    if seed != 42:
        args.append(f"seed={seed}")
    if name != "sweep":
        args.append(f"name={literal(name)}")
    home = home_argument(runs_dir)
    if home:
        args.append(f"runs_dir={literal(home)}")
    body = [spec_line, _space_code(space, spec.method), *notes,
            f"s = dragon.sweep({', '.join(args)})", "s.wait()", "print(s.trials)"]  # fmt: skip
    return present.portable_code("\n".join([*head, "", *body, ""]))
