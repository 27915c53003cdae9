"""`sweep()`: a search over a run's settings, each trial a normal run, the search a job.

    spec = dragon.RunSpec("sft", ds, "dragonfarm/tiny-support")
    s = dragon.sweep(spec, {"learning_rate": [1e-4, 3e-4, 1e-3], "r": [4, 16]})   # a grid
    s = dragon.sweep(spec, {"learning_rate": {"low": 1e-5, "high": 1e-3, "log": True}},
                     n_trials=8, sampler="tpe")
    s.wait(); s.trials          # one row per trial: its settings, state, objective, run
    s.best_run                  # the run of the best trial
    dragon.compare(s)           # the trials' runs side by side
    dragon.sweep_cancel(s); dragon.resume_sweep(s)

Optuna searches (grid, random or TPE; `sweeps.study`), its study in the sweep's folder; the
pruner stops trials whose held-out figure is clearly worse than the median of the trials
before at the same step (their runs cancelled, with a checkpoint). Everything a sweep is
asked is checked before anything is queued (`sweeps.space`). The record and folder are
`rundir.sweep_record`'s; the process is `sweeps.job`.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from dragonfarm_core.data.from_spec import dataset_from_spec
from dragonfarm_core.judging.judges import describe_judge
from dragonfarm_core.llm import LLM
from dragonfarm_core.llm.descriptions import api_key_of
from dragonfarm_core.rundir import files, location, sweep_record
from dragonfarm_core.rundir.create import new_dir, save_source
from dragonfarm_core.rundir.pipeline_record import RECORD_SUFFIX
from dragonfarm_core.rundir.run import Run, open_run
from dragonfarm_core.spec import RunSpec
from dragonfarm_core.sweeps.space import (
    SweepError,
    check_objective,
    check_prune,
    check_sampler,
    check_values,
    normalize,
    total_steps,
    warmup_steps,
)

CANCEL_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Sweep:
    """A sweep: its record, read afresh on every call. Made again from an id or a record
    path with `open_sweep`."""

    path: Path

    @property
    def id(self) -> str:
        return self.path.stem

    def status(self) -> dict[str, Any]:
        """The record (see `rundir.sweep_record`), a dead sweep process reported failed."""
        return sweep_record.live(self.path)

    @property
    def state(self) -> str | None:
        return self.status().get("status")

    @property
    def trials(self) -> pd.DataFrame:
        """One row per trial, in the order they started: number, state (running, complete,
        pruned, failed), each setting (by its field name), the objective's value, whether it
        is the best, the step it reached, its run id and folder, and its error."""
        return trials_frame(self.status())

    @property
    def best(self) -> dict[str, Any] | None:
        """The best complete trial's record entry (None before one completed)."""
        record = self.status()
        return next((t for t in record["trials"] if t["number"] == record.get("best")), None)

    @property
    def best_run(self) -> Run | None:
        best = self.best
        return open_run(best["run_dir"]) if best and best.get("run_dir") else None

    @property
    def runs(self) -> list[Run]:
        """The trials' runs, in trial order."""
        return [Run(d) for d in sweep_record.run_dirs(sweep_record.read(self.path))]

    def logs(self, n: int = 50) -> list[str]:
        return sweep_record.job(self.path).logs(n)

    def wait(self, timeout: float | None = None, poll: float = 1.0) -> dict[str, Any]:
        """Block until the sweep ends; its final record (TimeoutError after `timeout` s)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        record = self.status()
        while record.get("status") in sweep_record.ACTIVE:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"Sweep {self.id} is still {record.get('status')} after "
                                   f"{timeout:g} s; it keeps going.")  # fmt: skip
            time.sleep(poll)
            record = self.status()
        return record

    def cancel(self, wait: bool = True, timeout: float = CANCEL_TIMEOUT_S) -> dict[str, Any]:
        return sweep_cancel(self, wait=wait, timeout=timeout)

    def __fspath__(self) -> str:
        """The record's path: a Sweep goes wherever a path to it does (code, compare)."""
        return str(self.path)

    def __repr__(self) -> str:
        record = sweep_record.read(self.path)
        done = sum(t["state"] in ("complete", "pruned", "failed") for t in record["trials"])
        return (f"<Sweep {self.id!r} {record.get('status')}: {done}/{record['n_trials']} trials, "
                f"{record['objective']} ({record['direction']}) at {self.path}>")  # fmt: skip


def trials_frame(record: dict[str, Any]) -> pd.DataFrame:
    """The record's trials as a table (see `Sweep.trials`)."""
    names = [n.split(".", 1)[1] for n in record["space"]]
    rows = []
    for t in record["trials"]:
        params = {n.split(".", 1)[1]: v for n, v in t["params"].items()}
        rows.append({"trial": t["number"], "state": t["state"], **{n: params.get(n) for n in names},
                     record["objective"]: t.get("value"), "best": t["number"] == record.get("best"),
                     "step": t.get("step"), "run": t.get("run"), "run_dir": t.get("run_dir"),
                     "error": t.get("error")})  # fmt: skip
    columns = ["trial", "state", *names, record["objective"], "best", "step", "run", "run_dir",
               "error"]  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def open_sweep(x: Any, runs_dir: str | os.PathLike[str] | None = None) -> Sweep:
    """A sweep by handle, id (in the runs dir) or record path."""
    return x if isinstance(x, Sweep) else Sweep(sweep_record.find(x, runs_dir))


def _base(spec: Any) -> RunSpec:
    if isinstance(spec, RunSpec):
        return spec
    if isinstance(spec, Run | str | os.PathLike):
        run = open_run(spec)
        return RunSpec.from_dict(run.config, run.dir)
    raise TypeError(f"sweep() varies a run's settings: pass a dragon.RunSpec(...) (or a run, "
                    f"whose settings are the base), got {type(spec).__name__}.")  # fmt: skip


def _warmup(base: RunSpec) -> int:
    """The steps before which the pruner stops no trial: a fifth of the base run's."""
    dataset = dataset_from_spec(base.dataset) if isinstance(base.dataset, dict) else base.dataset
    args = base.args
    assert args is not None  # RunSpec fills it
    return warmup_steps(total_steps(args, len(dataset.split_records()[0])))


def _judge(judge: Any) -> Any:
    """The judge as the record keeps it: a local judge's model id or run folder, or an LLM's
    description (its key travels on the job's stdin)."""
    if judge is None or isinstance(judge, str):
        return judge
    if isinstance(judge, Run):
        return str(judge.dir)
    if isinstance(judge, LLM):
        return describe_judge(judge)
    raise SweepError(f"A sweep's judge runs in the sweep's own process: pass a local model id "
                     f"or run, or an LLM (dragon.judge_anthropic(), dragon.judge_openai(...)), "
                     f"not {type(judge).__name__}.")  # fmt: skip


def sweep(
    spec: Any,
    space: dict[str, Any],
    n_trials: int | None = None,
    sampler: str | None = None,
    objective: str = "eval_loss",
    prune: bool | None = None,
    judge: Any = None,
    seed: int = 42,
    name: str = "sweep",
    runs_dir: str | os.PathLike[str] | None = None,
    wait: bool = False,
) -> Sweep:
    """Search `space` around `spec` (a RunSpec, or a run whose settings are the base): each
    trial a run with the trial's settings, the objective read from it as Compare reads it.

    space: setting name -> list of values, or a range {"low": ..., "high": ..., "log": bool}
    (`sweeps.space`). sampler: "grid", "random" or "tpe" (None: a grid when every setting
    lists its values, else TPE). n_trials: how many trials (a grid's size by default).
    objective: any figure Compare shows that the method produces (eval_loss, perplexity,
    pref_accuracy, reward, metric_<name> after evaluate(), judge_win_rate / judge_mean_score
    with `judge`); whether lower or higher is better is Compare's. prune: stop trials whose
    held-out figure is worse than the median at the same step (None: where the trainer logs
    the objective while training). The sweep runs as a job that outlives this process;
    wait=True blocks until it ends. Returns the Sweep.
    """
    base = _base(spec)
    normal = normalize(space, base.method)
    if sampler is None:
        sampler = "grid" if all(isinstance(v, list) for v in normal.values()) else "tpe"
    count = check_sampler(sampler, normal, n_trials)
    direction = check_objective(objective, base, judge is not None)
    pruning = check_prune(prune, objective)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SweepError(f"seed must be a whole number >= 0, got {seed!r}.")
    judged = _judge(judge)
    base_dict = base.to_dict()
    check_values(base_dict, normal)
    warmup = _warmup(base) if pruning else 0
    home = location.runs_dir(runs_dir)
    folder = new_dir(None, sweep_record.root(home), name)
    path = folder.with_suffix(RECORD_SUFFIX)
    if not base_dict["dataset"].get("source"):
        base_dict["dataset"] = save_source(folder, base.dataset, base_dict["dataset"])
    sweep_record.write(path, {
        "schema": sweep_record.SCHEMA, "id": folder.name, "name": name,
        "model": base.model, "method": base.method, "base": base_dict, "space": normal,
        "sampler": sampler, "n_trials": count, "objective": objective, "direction": direction,
        "prune": pruning, "warmup_steps": warmup, "seed": seed, "judge": judged, "created_at": files.now_iso(),
        "status": "queued", "started_at": None, "finished_at": None, "error": None,
        "best": None, "trials": [],
    })  # fmt: skip
    s = _launch(Sweep(path), judge)
    if wait:
        s.wait()
    return s


def _launch(s: Sweep, judge: Any) -> Sweep:
    from dragonfarm_core.sweeps.job import JUDGE_KEY, command

    key = api_key_of(judge) if isinstance(judge, LLM) else None
    sweep_record.update(s.path, status="queued", finished_at=None, error=None, log_tail=None)
    stdin = json.dumps({JUDGE_KEY: key} if key else {}).encode()
    sweep_record.job(s.path).start(command(s.path), stdin=stdin, kind="sweep")
    return s


def list_sweeps(runs_dir: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Every sweep in the runs dir, newest first: id, name, model, method, status, trials done
    and in all, the objective, the best value and its run, created_at."""
    rows = []
    for path in sorted(sweep_record.root(runs_dir).glob(f"*{RECORD_SUFFIX}"), reverse=True):
        try:
            record = sweep_record.live(path)
        except (OSError, ValueError):
            continue
        best = next((t for t in record["trials"] if t["number"] == record.get("best")), None)
        rows.append({"id": record["id"], "name": record.get("name"),
                     "model": record.get("model"), "method": record.get("method"),
                     "status": record.get("status"),
                     "done": sum(t["state"] != "running" for t in record["trials"]),
                     "trials": record["n_trials"], "objective": record["objective"],
                     "best_value": best["value"] if best else None,
                     "best_run": best["run"] if best else None,
                     "created_at": record.get("created_at"), "path": str(path)})  # fmt: skip
    return rows


def sweep_status(x: Any, runs_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The sweep's record: status, trials (state, settings, value, run), best, timestamps."""
    return open_sweep(x, runs_dir).status()


def sweep_cancel(
    x: Any,
    runs_dir: str | os.PathLike[str] | None = None,
    wait: bool = True,
    timeout: float = CANCEL_TIMEOUT_S,
) -> dict[str, Any]:
    """Ask the sweep to stop: the trial under way is cancelled with a checkpoint (resume_sweep
    goes on from it). wait: return once it stopped; still going after `timeout` s, its process
    is killed and the trial's run cancelled. Returns the record."""
    s = open_sweep(x, runs_dir)
    record = s.status()
    if record.get("status") not in sweep_record.ACTIVE:
        return record
    files.request_cancel(sweep_record.folder(s.path))
    if not wait:
        return record
    try:
        return s.wait(timeout=timeout, poll=0.3)
    except TimeoutError:
        pass
    sweep_record.job(s.path).cancel(timeout=0)  # kills its process group
    for run in s.runs:
        if run.status().get("state") in files.ACTIVE_STATES:
            run.cancel(timeout=0)  # a trainer runs in a session of its own
    error = f"Killed: it did not stop within {timeout:g} s of the cancel request."
    return sweep_record.update(s.path, status="cancelled", finished_at=files.now_iso(),
                               error=error)  # fmt: skip


def resume_sweep(
    x: Any,
    runs_dir: str | os.PathLike[str] | None = None,
    judge: Any = None,
    wait: bool = False,
) -> Sweep:
    """Go on with a cancelled or failed sweep (its process killed, the machine restarted):
    the trial it was training goes on from its run's checkpoint, then the rest. judge: the
    same LLM judge again, where the objective is a judge's (its key is never stored)."""
    s = open_sweep(x, runs_dir)
    record = s.status()
    if record.get("status") in sweep_record.ACTIVE:
        raise RuntimeError(f"Sweep {s.id} is {record['status']}; wait for it or cancel it.")
    if record.get("status") == "succeeded":
        raise RuntimeError(f"Sweep {s.id} already succeeded; start a new sweep to search more.")
    if isinstance(record.get("judge"), dict) and not isinstance(judge, LLM):
        raise SweepError(f"Sweep {s.id}'s objective is an LLM judge's, whose key is never "
                         "stored: pass the same judge again, resume_sweep(id, judge=...).")  # fmt: skip
    _launch(s, judge)
    if wait:
        s.wait()
    return s
