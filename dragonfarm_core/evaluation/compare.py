"""`compare()`: runs side by side, one row per run with every figure its files hold.

    table = dragon.compare()                 # every run in the runs directory, oldest first
    table = dragon.compare(sft, dpo)         # these runs, in this order (Runs, ids or folders)
    table.attrs["better"]                    # column -> "lower" or "higher": which value is best

Each row says what the run is (its stage: the function that started it, train, prefer or
reinforce; its method; the run it continued from; the dataset and its rows; the settings that
matter most: learning rate, epochs, LoRA r, beta, group size) and every measurement known
about it: the final training loss, the held-out loss and its value before training,
perplexity, preference accuracy and reward margin, the mean held-out rewards at the end and at
the start (`reward`, `start_reward`, one `reward_<name>` / `start_reward_<name>` per reward),
the task metrics `evaluate()` stored (`metric_<name>`), the latest `judge()` result (its label,
win/tie/loss rates or mean score), and the duration in seconds. A run that lacks a measurement
has NaN there (None for text), never 0: a missing figure must not look like a measured one.

Everything is read from the run's files, through the readers that already exist: the runs()
row (`store.run_row`: state, model, started, duration, final loss, judge label), eval.json
(what training or a re-measure wrote), the final metrics in status.json where eval.json has no
value, metrics.json (`evaluation.stored_metrics`), progress.jsonl (the held-out loss logged at
step 0), and the judge summary status.json holds (judge.json when the status has none). A file
that cannot be read is warned about and its figures left empty; the run stays in the table.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from dragonfarm_core.evaluation.evaluate import stored_metrics
from dragonfarm_core.methods import METHODS
from dragonfarm_core.rundir import files, launch, location, pipeline_record, store, sweep_record
from dragonfarm_core.rundir.run import Run, open_run

# What a run is (text, None when unknown), then the settings and the figures (numbers, NaN).
TEXT_COLUMNS = ("id", "name", "state", "model", "method", "stage", "continued_from", "dataset")
SETTINGS_COLUMNS = ("n_train", "n_eval", "lr", "epochs", "lora_r", "beta", "group_size")
MEASURE_COLUMNS = ("train_loss", "eval_loss", "start_eval_loss", "perplexity", "pref_accuracy",
                   "reward_margin", "reward", "start_reward")  # fmt: skip
JUDGE_TEXT = ("judge", "judge_mode", "judge_against")
JUDGE_NUMBERS = ("judge_n", "judge_win_rate", "judge_tie_rate", "judge_loss_rate",
                 "judge_mean_score")  # fmt: skip
COLUMNS = [*TEXT_COLUMNS, "started", "duration", *SETTINGS_COLUMNS, *MEASURE_COLUMNS,
           *JUDGE_TEXT, *JUDGE_NUMBERS]  # fmt: skip
METRIC_PREFIX = "metric_"
# eval.json's mean held-out rewards: reward, reward_<name>, and their start_ values.
REWARD_KEY = re.compile(r"^(start_)?reward(_.+)?$")
# Which value of a column is best. Start values are where a run began, not a result; the
# duration, the sizes and the settings are no contest either.
LOWER_IS_BETTER = frozenset({"train_loss", "eval_loss", "perplexity", "judge_loss_rate"})
HIGHER_IS_BETTER = frozenset({"pref_accuracy", "reward_margin", "reward", "judge_win_rate",
                              "judge_mean_score"})  # fmt: skip
# Task metrics are scores where more is better, except a ratio whose best value is 1.
NO_BEST_METRICS = frozenset({"length_ratio"})


def better(column: str) -> str | None:
    """Which value of `column` is best: "lower" or "higher"; None where no value is."""
    if column in LOWER_IS_BETTER:
        return "lower"
    if column in HIGHER_IS_BETTER or column.startswith("reward_"):
        return "higher"
    if column.startswith(METRIC_PREFIX):
        # A metric asked for twice is stored as <name>_2, <name>_3 (evaluation.named_metrics).
        name = re.sub(r"_\d+$", "", column.removeprefix(METRIC_PREFIX))
        return None if name in NO_BEST_METRICS else "higher"
    return None


def _number(value: Any) -> float | None:
    """A finite number from a run file, else None (a bool, text or NaN is no measurement)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _read(run_dir: Path, what: str, reader: Callable[[], Any], kind: type = dict) -> Any:
    """`reader()`'s value when it is a `kind`, else None; a damaged file is warned about, and
    its figures are left empty rather than the whole table refused."""
    try:
        value = reader()
    except (OSError, ValueError) as e:
        warnings.warn(
            f"Run {run_dir.name}: its {what} cannot be read ({e}); its figures are left empty.",
            stacklevel=4,
        )
        return None
    return value if isinstance(value, kind) else None


def _refs(given: Iterable[Any], runs_dir: Any = None) -> list[Any]:
    """The run references, lists and tuples of them flattened, a pipeline (handle, id or
    record) as its runs; anything else is a TypeError."""
    out: list[Any] = []
    for ref in given:
        if isinstance(ref, list | tuple):
            out += _refs(ref, runs_dir)
        elif (record := pipeline_record.resolve(ref, runs_dir)) is not None:
            out += pipeline_record.run_dirs(pipeline_record.read(record))
        elif (record := sweep_record.resolve(ref, runs_dir)) is not None:
            out += sweep_record.run_dirs(sweep_record.read(record))
        elif isinstance(ref, Run | str | os.PathLike):
            out.append(ref)
        else:
            raise TypeError(
                f"compare() takes runs: a Run, a run id or a run folder, a pipeline, a sweep, or a "
                f"list of them; got {type(ref).__name__} ({ref!r}). dragon.runs() lists the runs."
            )
    return out


def _runs(given: tuple[Any, ...], runs_dir: Any) -> list[Run]:
    """The runs to compare: those given, in order and once each, resolved as open_run does
    (inside `runs_dir` when it is given); none given: every run in the runs dir, oldest first."""
    if given:
        found: dict[Path, Run] = {}
        for ref in _refs(given, runs_dir):
            run = open_run(ref, runs_dir)
            found.setdefault(run.dir, run)
        return list(found.values())
    listed = [Run(d) for d in store.run_dirs(location.runs_dir(runs_dir))]
    return sorted(listed, key=lambda run: (str(run.config.get("created_at") or ""), run.dir.name))


def _settings(config: dict[str, Any]) -> dict[str, Any]:
    """What the run is and how it was trained, from config.json."""
    method = config.get("method")
    dataset, data = config.get("dataset") or {}, config.get("data") or {}
    args, lora = config.get("args") or {}, config.get("lora") or {}
    group = config.get("method_args") or {}
    return {
        "stage": METHODS[method].function if method in METHODS else None,
        "dataset": dataset.get("name") if isinstance(dataset, dict) else None,
        "n_train": data.get("n_train"),
        "n_eval": data.get("n_eval"),
        "lr": args.get("learning_rate"),
        "epochs": args.get("epochs"),
        "lora_r": lora.get("r"),
        "beta": group.get("beta"),
        "group_size": group.get("group_size"),
    }


def _start_eval_loss(run_dir: Path) -> float | None:
    """The held-out loss logged at step 0, before any training (progress.jsonl)."""
    rows = files.read_progress(run_dir)
    return next((_number(r.get("eval_loss")) for r in rows if r.get("step") == 0), None)


def _measures(run: Run, status: dict[str, Any]) -> dict[str, Any]:
    """The held-out figures: eval.json's, else the trainer's final metrics in status.json."""
    results = _read(run.dir, files.EVAL, lambda: files.read_eval(run.dir)) or {}
    stored = status.get("metrics")
    final: dict[str, Any] = stored if isinstance(stored, dict) else {}
    rewards = [k for k in {**final, **results} if REWARD_KEY.match(k)]
    out: dict[str, Any] = {}
    for key in [*MEASURE_COLUMNS[1:], *rewards]:
        found = _number(results.get(key))
        out[key] = found if found is not None else _number(final.get(key))
    if out["start_eval_loss"] is None:
        out["start_eval_loss"] = _start_eval_loss(run.dir)
    metrics = _read(run.dir, files.METRICS, lambda: stored_metrics(run)) or {}
    out |= {f"{METRIC_PREFIX}{name}": _number(mean) for name, mean in metrics.items()}
    return out


def _judge(run_dir: Path, status: dict[str, Any]) -> dict[str, Any]:
    """The latest judge() result: the summary status.json holds, else judge.json's."""
    summary = status.get("judge")
    if not isinstance(summary, dict):
        stored = _read(run_dir, files.JUDGE, lambda: files.read_json(run_dir / files.JUDGE))
        summary = (stored or {}).get("summary")
    if not isinstance(summary, dict):
        return {}
    pairwise = summary.get("mode") == "pairwise"
    label, against = summary.get("label"), summary.get("against")
    return {
        "judge": label if isinstance(label, str) else None,
        "judge_mode": summary.get("mode") if isinstance(summary.get("mode"), str) else None,
        "judge_against": against if isinstance(against, str) else None,
        "judge_n": _number(summary.get("judged" if pairwise else "scored")),
        "judge_win_rate": _number(summary.get("win_rate")),
        "judge_tie_rate": _number(summary.get("tie_rate")),
        "judge_loss_rate": _number(summary.get("loss_rate")),
        "judge_mean_score": _number(summary.get("mean_score")),
    }


def _row(run: Run) -> dict[str, Any]:
    """One run's row: its runs() row, its settings, its figures, its judgement."""
    listed = store.run_row(run.dir)
    status = launch.live_status(run.dir)
    row = {key: listed.get(key) for key in ("id", "name", "state", "model", "method",
                                            "continued_from", "started", "duration")}  # fmt: skip
    row["train_loss"] = listed.get("final_loss")
    row |= _settings(run.config)
    row |= _measures(run, status)
    row |= _judge(run.dir, status)
    return row


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The rows as a table: the fixed columns, then any reward and metric columns a run has;
    text columns hold None where unknown, number columns NaN."""
    # reward_<name> beside start_reward_<name>, the metrics last.
    extra = sorted({k for r in rows for k in r if k not in COLUMNS},
                   key=lambda k: (k.startswith(METRIC_PREFIX), k.removeprefix("start_"), k))  # fmt: skip
    columns = [*COLUMNS, *extra]
    frame = pd.DataFrame([{c: r.get(c) for c in columns} for r in rows], columns=columns)
    for column in columns:
        if column == "started":
            frame[column] = pd.to_datetime(frame[column], utc=True)
        elif column not in TEXT_COLUMNS and column not in JUDGE_TEXT:
            frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
        else:
            frame[column] = frame[column].astype(object).where(frame[column].notna(), None)
    frame.attrs["better"] = {c: b for c in columns if (b := better(c)) is not None}
    return frame


def compare(*runs: Any, runs_dir: str | os.PathLike[str] | None = None) -> pd.DataFrame:
    """One row per run with its stage, what it started from, its data and key settings, and
    every figure known about it (see the module docstring); NaN where a run lacks one.

    runs: Runs, run ids or run folders (or lists of them), in the order the rows should have;
    none: every run in the runs directory, oldest first (a run after the one it continued
    from). With `runs_dir` given, each must be a run in it or its archived/ (refused
    otherwise, like `open_run`); an id is looked up in the runs directory.
    `table.attrs["better"]` maps each column where one value is best to "lower" or "higher".
    """
    return _frame([_row(run) for run in _runs(runs, runs_dir)])
