"""A sweep's files: its record `<runs_dir>/sweeps/<id>.json` and its folder beside it.

The record is what every reader (the sweep's handle, `compare`, the app, `code`) reads; only
the sweep's job writes it, after every change of state. Optuna's own storage, `study.db` in
the folder, is what the sampler and the pruner read; the record mirrors its trials:

    {"schema": 1, "id": "20261207-130000-sweep", "name": "sweep", "model": "...",
     "method": "sft", "base": {RunSpec.to_dict()}, "space": {"args.learning_rate": {...}},
     "sampler": "grid", "n_trials": 8, "objective": "eval_loss", "direction": "minimize",
     "prune": true, "seed": 42, "judge": null, "created_at": ..., "status": "running",
     "started_at": ..., "finished_at": null, "error": null, "best": 3,
     "trials": [{"number": 0, "state": "complete", "params": {...}, "value": 1.23,
                 "run": "<run id>", "run_dir": "...", "step": 40, "steps": 40,
                 "pruned_at": null, "error": null}, ...]}

Trial states: running, complete, pruned (a cancelled run with a checkpoint), failed. The
folder `sweeps/<id>/` is the sweep's job folder (`rundir.jobs`: status.json, job.log,
cancel.request), with study.db and the rows of a dataset that lived only in memory.
Pure standard library: `compare` and the app read it without Optuna.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dragonfarm_core.rundir import files, jobs, location
from dragonfarm_core.rundir.pipeline_record import folder, resolve_record, write

SCHEMA = 1
ACTIVE = ("queued", "running")
STUDY_DB = "study.db"
TRIAL_STATES = ("running", "complete", "pruned", "failed")

__all__ = ["ACTIVE", "STUDY_DB", "find", "folder", "job", "live", "read", "resolve", "root",
           "run_dirs", "update", "write"]  # fmt: skip


def root(runs_dir: str | os.PathLike[str] | None = None) -> Path:
    """<runs_dir>/sweeps/."""
    return location.runs_dir(runs_dir) / files.SWEEPS_DIR


def study_path(path: Path) -> Path:
    """Optuna's SQLite storage of the sweep at `path`."""
    return folder(path) / STUDY_DB


def job(path: Path) -> jobs.Job:
    wording = jobs.Wording(process="sweep", noun="sweep",
                           after_gone="resume it with dragon.resume_sweep(id)",
                           never_started="Resume it with dragon.resume_sweep(id).")  # fmt: skip
    return jobs.open_job(folder(path), wording=wording, name=f"Sweep {path.stem}")


def _is_record(record: Any) -> bool:
    return isinstance(record, dict) and isinstance(record.get("trials"), list) and "space" in record


def read(path: Path) -> dict[str, Any]:
    record = files.read_json(path)
    if not _is_record(record):
        raise FileNotFoundError(f"{path} is not a sweep record (sweeps/<id>.json).")
    return record


def update(path: Path, **changes: Any) -> dict[str, Any]:
    record = {**read(path), **changes}
    write(path, record)
    return record


def resolve(x: Any, runs_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """The record a sweep reference names (a handle, a record path, its folder, or its id in
    the runs dir); None when `x` is none of these (e.g. a run or a pipeline)."""
    return resolve_record(x, root(runs_dir), _is_record)


def find(x: Any, runs_dir: str | os.PathLike[str] | None = None) -> Path:
    """`resolve`, or a FileNotFoundError that says where it looked."""
    found = resolve(x, runs_dir)
    if found is None:
        raise FileNotFoundError(
            f"No sweep {x!r}: pass a sweep handle, its id or its record "
            f"({root(runs_dir)}/<id>.json). dragon.list_sweeps() lists them."
        )
    return found


def run_dirs(record: dict[str, Any]) -> list[Path]:
    """The runs the sweep's trials trained, in trial order."""
    return [Path(t["run_dir"]) for t in record["trials"] if t.get("run_dir")]


def live(path: Path) -> dict[str, Any]:
    """The record, its status the job's where the job ended without saying so (killed: failed,
    with the log's tail). Reading never writes."""
    record = read(path)
    if record.get("status") not in ACTIVE:
        return record
    status = job(path).status()
    if status.get("state") in ACTIVE or status.get("state") is None:
        return record
    record = read(path)  # its process may have written its final state just before it ended
    if record.get("status") not in ACTIVE:
        return record
    return {**record, "status": status.get("state"), "error": status.get("error"),
            "log_tail": status.get("log_tail"), "finished_at": status.get("finished_at")}  # fmt: skip
