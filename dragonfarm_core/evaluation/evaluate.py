"""`evaluate()`: a finished run's held-out measurements, its sample replies, and task metrics.

    ev = dragon.evaluate(run)                         # what training wrote at its end
    ev.eval_loss, ev.perplexity, ev.samples          # SFT; DPO/ORPO: ev.pref_accuracy, ...
    ev = dragon.evaluate(run, n_samples=100, metrics=["exact", dragon.metric_regex(r"^Hi ")])
    ev.metrics                                        # {"exact": 0.12, "regex:^Hi ": 0.97}

    pending = dragon.start_evaluation(run, recompute=True)   # returns at once (the app's way)
    pending.state; pending.cancel(); ev = pending.wait()

Training writes eval.json and samples.json at its end; this reads them. It recomputes them with
the saved adapter when asked (`recompute=True`), when nothing was saved (a cancelled run), or
when more samples are asked for than were written, as a background job (`rundir.jobs`: folder
<run>/jobs/evaluate-<time>/, `python -m dragonfarm_core.trainers.evaluate_run`, queued for the
run's device), so this process never imports torch; `evaluate` waits for it, with a timeout.
Metric results go into the run's metrics.json (per metric: mean, per-row values, row count),
where the comparison table finds them.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dragonfarm_core.methods import METHODS
from dragonfarm_core.rewards import runner
from dragonfarm_core.rewards.scoring import REGEX_TIMEOUT_S
from dragonfarm_core.rewards.task_metrics import apply_metrics
from dragonfarm_core.rewards.task_metrics import metrics as builtin_metrics
from dragonfarm_core.rundir import files, jobs, queue
from dragonfarm_core.rundir.run import Run, open_run

RECOMPUTE_TIMEOUT_S = 3600.0
# How long a cancelled recompute gets to stop by itself before its process group is killed.
CANCEL_TIMEOUT_S = 10.0
JOB_KIND = "evaluate"
SAMPLE_COLUMNS = ("prompt", "reference", "generated")
RECOMPUTABLE = tuple(name for name, row in METHODS.items() if row.recomputable)


@dataclass(frozen=True, eq=False)
class Evaluation(Mapping[str, Any]):
    """A run's evaluation: eval.json's values, `samples` and `metrics`, as a read-only mapping.

    The manual returns a list of named values, so this is a full `collections.abc.Mapping`
    (`ev["eval_loss"]`, `"pref_accuracy" in ev`, `dict(ev)`, `ev.keys()`); eval.json's values are
    attributes too (`ev.eval_loss`). Every other public result object is a plain dataclass.

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

    def __iter__(self) -> Iterator[str]:
        yield from self.results
        yield from ("samples", "metrics")

    def __len__(self) -> int:
        return len(self.results) + 2

    # Mapping's value equality would compare the samples DataFrames, which has no truth value.
    __eq__ = object.__eq__
    __hash__ = object.__hash__

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
    pairs = method in METHODS and METHODS[method].data_kind == "pairs"
    columns = list(SAMPLE_COLUMNS) + (["rejected"] if pairs else [])
    frame = pd.DataFrame(samples, columns=None if samples else columns)
    for column in columns:
        if column not in frame:
            frame[column] = None
    return frame[columns + [c for c in frame.columns if c not in columns]]


def regex_values(name: str, metric: Any, generated: list[str]) -> list[float]:
    """A metric_regex's values, searched in the reward helper (rewards.runner) with the regex
    reward's time limit: in this process, a pattern that backtracks without end would hold
    the GIL and freeze the app for everyone."""
    texts = [g or "" for g in generated]
    if not texts:
        return []
    ignore_case = getattr(metric, "ignore_case", True)
    found = runner.search(metric.pattern, not ignore_case, texts, REGEX_TIMEOUT_S)
    if len(found) < len(texts) or found[-1] is None:
        raise ValueError(
            f"Metric {name!r} gave up after {REGEX_TIMEOUT_S:g} s on row {len(found) - 1}: its "
            f"pattern backtracks too much (nested repeats such as (.+)+ can take exponential "
            "time). Simplify the pattern, e.g. one repeat per part and anchors."
        )
    return [1.0 if hit else 0.0 for hit in found]


def store_metrics(run: Run, chosen: dict[str, Any], samples: pd.DataFrame) -> dict:
    """Score the samples with `chosen` and merge the results into metrics.json; returns
    name -> mean. (A recompute empties metrics.json: its entries scored the old samples.)"""
    generated = list(samples["generated"])
    plain = {n: m for n, m in chosen.items() if getattr(m, "pattern", None) is None}
    values = apply_metrics(plain, generated, list(samples["reference"]), list(samples["prompt"]))
    values = {
        n: values[n] if n in plain else regex_values(n, m, generated) for n, m in chosen.items()
    }
    path = run.dir / files.METRICS
    stored = files.read_record(path) or {}  # a torn file is written anew
    for name, column in values.items():
        stored[name] = {"mean": _mean(column), "values": column, "n": len(column),
                        "computed_at": files.now_iso()}  # fmt: skip
    files.write_json(path, stored)
    return {name: stored[name]["mean"] for name in values}


def stored_metrics(run: Run) -> dict[str, float | None]:
    """name -> mean of the metrics stored earlier (none after a recomputation)."""
    stored = files.read_record(run.dir / files.METRICS) or {}
    return {name: entry.get("mean") for name, entry in stored.items() if isinstance(entry, dict)}


def _read(run: Run, n: int, chosen: dict[str, Any] | None, recomputed: bool) -> Evaluation:
    """The Evaluation of what the run's files hold now, with `chosen` scored and stored."""
    results = files.read_eval(run.dir) or {}
    samples = _samples_frame((files.read_samples(run.dir) or [])[:n], run.method)
    means = store_metrics(run, chosen, samples) if chosen else stored_metrics(run)
    return Evaluation(run.id, run.method, results, samples, means, recomputed=recomputed)


def saved_evaluation(run: Run | str | os.PathLike[str], n_samples: int = 10) -> Evaluation | None:
    """What training wrote at its end (eval.json, the first `n_samples` of samples.json) with
    the metric means stored earlier, read only: nothing is measured, scored or written. None
    when the run has no eval.json (yet): `evaluate` would measure it with the saved adapter."""
    run = open_run(run)
    if files.read_eval(run.dir) is None:
        return None
    return _read(run, n_samples, None, recomputed=False)


def evaluator_command(run_dir: Path, n_samples: int, job_dir: Path) -> list[str]:
    """The recompute's process: the evaluator entry point, run as the job in `job_dir`."""
    return [sys.executable, "-m", "dragonfarm_core.trainers.evaluate_run", str(run_dir),
            "--n-samples", str(n_samples), "--job", str(job_dir)]  # fmt: skip


def start_recompute(run: Run, n_samples: int) -> jobs.Job:
    """Start rewriting the run's eval.json and samples.json with its saved adapter, as a job
    in <run>/jobs/evaluate-<time>/ queued for the run's device; returns it at once."""
    return jobs.start_on_run(
        run.dir,
        JOB_KIND,
        lambda job_dir: evaluator_command(run.dir, n_samples, job_dir),
        device=queue.queue_key(run.config),
    )


@dataclass(frozen=True, eq=False)
class EvaluationJob:
    """An evaluation under way, as `start_evaluation` returns it (at once).

        pending = dragon.start_evaluation(run, n_samples=100, metrics=["exact"])
        pending.state               # queued (waiting for the device), running, succeeded...
        pending.logs(20)            # the recompute's log
        ev = pending.wait()         # the Evaluation, once the recompute is done
        pending.cancel()

    `job` is the recompute (<run>/jobs/evaluate-<time>/), or None when what training wrote
    answers the request: the evaluation is then done from the start.
    """

    run: Run
    n_samples: int
    metrics: dict[str, Any] | None = None
    job: jobs.Job | None = None

    def status(self) -> dict[str, Any]:
        """The recompute job's status (a dead evaluator is reported failed with its log tail)."""
        return self.job.status() if self.job is not None else {"state": "succeeded"}

    @property
    def state(self) -> str | None:
        return self.status().get("state")

    @property
    def done(self) -> bool:
        return self.state not in files.ACTIVE_STATES

    def logs(self, n: int = 20) -> list[str]:
        return self.job.logs(n) if self.job is not None else []

    def cancel(self, timeout: float = CANCEL_TIMEOUT_S) -> EvaluationJob:
        """Stop the recompute (interrupted at once; its process group is killed after
        `timeout` s if it does not stop). eval.json stays what it was unless it was written."""
        if self.job is not None:
            self.job.cancel(timeout)
        return self

    def wait(self, timeout: float | None = None, poll: float = 0.2) -> Evaluation:
        """Block until the recompute ends, then read and score: the Evaluation. RuntimeError
        when it failed or was cancelled, TimeoutError after `timeout` s (it keeps going)."""
        if self.job is not None:
            self.job.wait(None if timeout is None or math.isinf(timeout) else timeout, poll)
        return self.result()

    def result(self) -> Evaluation:
        """The Evaluation, once done (RuntimeError while it runs, or when it did not succeed)."""
        status = self.status()
        state = status.get("state")
        if state == "succeeded":
            return _read(self.run, self.n_samples, self.metrics, recomputed=self.job is not None)
        if state in files.ACTIVE_STATES:
            raise RuntimeError(
                f"Evaluating run {self.run.id} is still {state}; wait for it (.wait())."
            )
        ended = "was cancelled." if state == "cancelled" else jobs.failure(status)
        message = f"Evaluating run {self.run.id} {ended}"
        raise RuntimeError(jobs.with_log_tail(message, status, self.job) if self.job else message)


def start_evaluation(
    run: Run | str | os.PathLike[str],
    n_samples: int = 10,
    recompute: bool = False,
    metrics: Mapping[str, Any] | Sequence[Any] | None = None,
) -> EvaluationJob:
    """Start the evaluation `evaluate` does, and return at once (see EvaluationJob).

    Nothing runs when what training wrote answers the request; otherwise the saved adapter is
    measured again in a background job, which waits for the run's device like a training.
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
    if not _needs_recompute(run, n, recompute):
        return EvaluationJob(run, n, chosen)
    return EvaluationJob(run, n, chosen, start_recompute(run, n))


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
    pending = start_evaluation(run, n_samples, recompute, metrics)
    try:
        return pending.wait(timeout)
    except TimeoutError:
        pending.cancel(timeout=0)
        tail = "\n".join(pending.logs(20))
        raise TimeoutError(
            f"Evaluating run {pending.run.id} took longer than {timeout:g} s and was stopped. Ask "
            f"for fewer samples (n_samples=) or pass a longer timeout=.\nLast lines of the log:\n"
            f"{tail}"
        ) from None
    except KeyboardInterrupt:  # leave no evaluator behind
        pending.cancel(timeout=0)
        raise
