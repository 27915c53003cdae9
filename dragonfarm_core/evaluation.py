"""`evaluate()`: a finished run's held-out measurements, its sample replies, and task metrics.

    ev = dragon.evaluate(run)                         # what training wrote at its end
    ev.eval_loss, ev.perplexity, ev.samples          # SFT; DPO/ORPO: ev.pref_accuracy, ...
    ev = dragon.evaluate(run, n_samples=100, metrics=["exact", dragon.metric_regex(r"^Hi ")])
    ev.metrics                                        # {"exact": 0.12, "regex:^Hi ": 0.97}

Training writes eval.json and samples.json at its end; this reads them. It recomputes them with
the saved adapter when asked (`recompute=True`), when nothing was saved (a cancelled run), or
when more samples are asked for than were written, in a subprocess
(`python -m dragonfarm_core.trainers.evaluate_run`), so this process never imports torch.
Metric results go into the run's metrics.json (per metric: mean, per-row values, row count),
where the comparison table finds them.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from dragonfarm_core.task_metrics import apply_metrics
from dragonfarm_core.task_metrics import metrics as builtin_metrics
from dragonfarm_core.rundir import files, launch
from dragonfarm_core.rundir.run import Run, open_run

RECOMPUTE_TIMEOUT_S = 3600.0
KILL_GRACE_S = 5.0
SAMPLE_COLUMNS = ("prompt", "reference", "generated")
RECOMPUTABLE = ("sft", "dpo", "orpo")


@dataclass(frozen=True, eq=False)
class Evaluation:
    """A run's evaluation: eval.json's values (also as attributes), samples and metric means.

    SFT runs hold eval_loss, perplexity and eval_tokens; DPO and ORPO runs pref_accuracy,
    reward_margin, eval_pairs and eval_loss (their training objective on held-out pairs); GRPO
    runs whatever their trainer measured (mean reward per reward).
    """

    run_id: str
    method: str
    results: dict[str, Any]
    samples: pd.DataFrame
    metrics: dict[str, float | None] = field(default_factory=dict)
    recomputed: bool = False

    def __getattr__(self, name: str) -> Any:
        results = self.__dict__.get("results") or {}
        if name in results:
            return results[name]
        raise AttributeError(
            f"The evaluation of run {self.__dict__.get('run_id')} has no {name!r}; "
            f"it holds {', '.join(results) or 'nothing'}, samples and metrics."
        )

    def __getitem__(self, key: str) -> Any:
        if key in ("samples", "metrics"):
            return getattr(self, key)
        return self.results[key]

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def to_dict(self) -> dict[str, Any]:
        """eval.json's values, plus samples (list of dicts) and metrics (name -> mean)."""
        samples = self.samples.to_dict(orient="records")
        return {**self.results, "samples": samples, "metrics": dict(self.metrics)}

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in self.results.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and k != "step"
        )
        metrics = ", ".join(
            f"{k}={'NA' if v is None else f'{v:.3g}'}" for k, v in self.metrics.items()
        )
        return (
            f"<Evaluation of {self.run_id} ({self.method}): {shown}; {len(self.samples)} "
            f"samples{f'; metrics {metrics}' if metrics else ''}>"
        )


def metric_name(metric: Any) -> str:
    """How a metric is keyed in metrics.json: its built-in name, "regex:<pattern>" for
    metric_regex(...), else the function's name."""
    if isinstance(metric, str):
        return metric
    pattern = getattr(metric, "pattern", None)
    if isinstance(pattern, str):
        return f"regex:{pattern}"
    return str(getattr(metric, "__name__", "metric"))


def named_metrics(chosen: Mapping[str, Any] | Sequence[Any] | str | Any) -> dict[str, Any]:
    """name -> metric (a built-in name or a callable), names repeated as name_2, name_3."""
    if isinstance(chosen, str) or callable(chosen):
        chosen = [chosen]
    if isinstance(chosen, Mapping):
        items = [(str(k), m) for k, m in chosen.items()]
    else:
        items = [(metric_name(m), m) for m in chosen]
    builtin, named = builtin_metrics(), {}
    for base, metric in items:
        if isinstance(metric, str) and metric not in builtin:
            raise ValueError(
                f"Unknown metric {metric!r}; use one of {', '.join(builtin)}, "
                "dragon.metric_regex(...), or a function (generated, reference, prompt) -> float."
            )
        name, n = base, 1
        while name in named:
            n += 1
            name = f"{base}_{n}"
        named[name] = metric
    return named


def _mean(values: list[float]) -> float | None:
    """Mean over the finite values (length_ratio gives NaN where there is no reference)."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return sum(finite) / len(finite) if finite else None


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the evaluator's process group, SIGKILL it after a grace period."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(KILL_GRACE_S)
            return


def recompute_evaluation(run: Run, n_samples: int, timeout: float = RECOMPUTE_TIMEOUT_S) -> None:
    """Rewrite the run's eval.json and samples.json in a subprocess with its saved adapter."""
    argv = [sys.executable, "-m", "dragonfarm_core.trainers.evaluate_run", str(run.dir),
            "--n-samples", str(n_samples)]  # fmt: skip
    with open(files.log_path(run.dir), "ab") as log:
        log.write(f"[dragonfarm] {files.now_iso()} evaluate: {' '.join(argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=run.dir,
            env=launch.child_env(),
            start_new_session=True,
            close_fds=True,
        )
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        _stop_group(proc)
        tail = "\n".join(files.read_log_tail(run.dir, 20))
        raise TimeoutError(
            f"Evaluating run {run.id} took longer than {timeout:g} s and was stopped. Ask for "
            f"fewer samples (n_samples=) or pass a longer timeout=.\nLast lines of the log:\n{tail}"
        ) from None
    finally:
        if proc.poll() is None:  # interrupted (Ctrl-C): leave no evaluator behind
            _stop_group(proc)
    if code != 0:
        tail = "\n".join(files.read_log_tail(run.dir, 30))
        raise RuntimeError(
            f"Evaluating run {run.id} failed (exit status {code}).\nLast lines of the log:\n{tail}"
        )


def _available_rows(run: Run) -> int:
    """How many rows samples can come from: the held-out rows, else the training rows."""
    data = run.config.get("data") or {}
    return int(data.get("n_eval") or data.get("n_train") or 0)


def _needs_recompute(run: Run, n: int, recompute: bool) -> bool:
    """Whether eval.json and samples.json must be measured (again) before they are read."""
    results, samples = files.read_eval(run.dir), files.read_samples(run.dir)
    if run.method not in RECOMPUTABLE:
        if recompute or results is None:
            raise RuntimeError(
                f"Run {run.id} is a {run.method} run: its trainer's {files.EVAL} is its "
                f"evaluation{'' if results else ', and it has none yet'}; only "
                f"{', '.join(RECOMPUTABLE)} runs can be evaluated again."
            )
        return False
    if not recompute and results is not None and samples is not None and len(samples) >= n:
        return False
    if not files.adapter_dir(run.dir).is_dir():
        state = run.status().get("state")
        raise RuntimeError(
            f"Run {run.id} ({state}) has no saved adapter and no complete evaluation; there is "
            "nothing to evaluate. Resume it with dragon.resume(run), or train a new run."
        )
    return True


def _samples_frame(samples: list[dict[str, Any]], method: str) -> pd.DataFrame:
    columns = list(SAMPLE_COLUMNS) + (["rejected"] if method in ("dpo", "orpo") else [])
    frame = pd.DataFrame(samples, columns=None if samples else columns)
    for column in columns:
        if column not in frame:
            frame[column] = None
    return frame[columns + [c for c in frame.columns if c not in columns]]


def store_metrics(run: Run, chosen: dict[str, Any], samples: pd.DataFrame, fresh: bool) -> dict:
    """Score the samples with `chosen` and merge the results into metrics.json (replace it
    when `fresh`: older entries scored samples that no longer exist); returns name -> mean."""
    values = apply_metrics(
        chosen, list(samples["generated"]), list(samples["reference"]), list(samples["prompt"])
    )
    path = run.dir / files.METRICS
    stored = {} if fresh else (files.read_json(path) or {})
    for name, column in values.items():
        stored[name] = {"mean": _mean(column), "values": column, "n": len(column),
                        "computed_at": files.now_iso()}  # fmt: skip
    files.write_json(path, stored)
    return {name: stored[name]["mean"] for name in values}


def stored_metrics(run: Run, fresh: bool) -> dict[str, float | None]:
    """name -> mean of the metrics stored earlier (none after a recomputation)."""
    path = run.dir / files.METRICS
    if fresh and path.exists():
        files.write_json(path, {})
    return {name: entry.get("mean") for name, entry in (files.read_json(path) or {}).items()}


def evaluate(
    run: Run | str | os.PathLike[str],
    n_samples: int = 10,
    recompute: bool = False,
    metrics: Mapping[str, Any] | Sequence[Any] | None = None,
    *,
    timeout: float = RECOMPUTE_TIMEOUT_S,
) -> Evaluation:
    """The held-out evaluation of a finished run, its sample replies and task metrics.

    n_samples: sample replies to return (and score), up to the number of held-out rows (the
    training rows when none were held out); asking for more than training wrote generates them.
    recompute: measure again with the saved adapter instead of reading what training wrote.
    metrics: names from dragon.metrics(), dragon.metric_regex(...) or functions
    (generated, reference, prompt) -> float, as a list or a dict name -> metric; scored on the
    samples and stored in the run. Without metrics, the means stored earlier are returned.
    timeout: seconds a recomputation may take before it is stopped.
    """
    run = open_run(run)
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 0:
        raise ValueError(f"n_samples must be a whole number >= 0, got {n_samples!r}.")
    chosen = named_metrics(metrics) if metrics is not None else None
    state = run.status().get("state")
    if state in files.ACTIVE_STATES:
        raise RuntimeError(
            f"Run {run.id} is still {state}; evaluate it once it has finished (run.wait())."
        )
    if state == "bundled":
        raise RuntimeError(
            f"Run {run.id} is bundled to train elsewhere; bring its results back with "
            "dragon.import_results(run, zip_path) before evaluating it."
        )
    n = min(n_samples, _available_rows(run))
    fresh = _needs_recompute(run, n, recompute)
    if fresh:
        recompute_evaluation(run, n, timeout)
    results = files.read_eval(run.dir) or {}
    samples = _samples_frame((files.read_samples(run.dir) or [])[:n], run.method)
    means = store_metrics(run, chosen, samples, fresh) if chosen else stored_metrics(run, fresh)
    return Evaluation(run.id, run.method, results, samples, means, recomputed=fresh)
