"""A pipeline's files: its record `<runs_dir>/pipelines/<id>.json` and its folder beside it.

The record is the pipeline's one source of truth, written atomically (`files.write_json`)
after every change of state:

    {"schema": 1, "id": "20261201-170000-pipeline", "name": "pipeline", "model": "...",
     "background": true, "status": "running", "current": 1,
     "created_at": ..., "started_at": ..., "finished_at": null, "error": null,
     "pid": 4242, "pid_create_time": 1764608400.0,
     "steps": [{"kind": "train", "spec": {...}, "state": "succeeded", "run": "<run id>",
                "run_dir": "...", "summary": {...}, "started_at": ..., "finished_at": ...,
                "error": null}, ...]}

Step states: pending, running, succeeded, failed, cancelled. The folder `pipelines/<id>/` is
the pipeline's job folder (`rundir.jobs`): its status.json, its log (job.log, which a
foreground pipeline writes too) and cancel.request, and the rows of a dataset that lived
only in memory (so the record alone replays every step).

`live(path)` is the record as every reader should see it: a pipeline whose process is gone
while it was still running is turned into failed, with the log's tail (written back).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dragonfarm_core.rundir import files, jobs, location

SCHEMA = 1
ACTIVE = ("queued", "running")
RECORD_SUFFIX = ".json"


def root(runs_dir: str | os.PathLike[str] | None = None) -> Path:
    """<runs_dir>/pipelines/."""
    return location.runs_dir(runs_dir) / files.PIPELINES_DIR


def folder(path: Path) -> Path:
    """The pipeline's job folder beside its record."""
    return path.with_suffix("")


def log_path(path: Path) -> Path:
    return files.job_log_path(folder(path))


def job(path: Path) -> jobs.Job:
    wording = jobs.Wording(process="pipeline", noun="pipeline",
                           after_gone="resume it with dragon.resume_pipeline(id)",
                           never_started="Resume it with dragon.resume_pipeline(id).")  # fmt: skip
    return jobs.open_job(folder(path), wording=wording, name=f"Pipeline {path.stem}")


def create(runs_dir: Any, name: str, model: str, specs: list[dict[str, Any]],
           background: bool) -> Path:  # fmt: skip
    """A new record (status queued, every step pending) under a fresh id; its path."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"name must be a non-empty string, got {name!r}.")
    from dragonfarm_core.rundir.create import new_dir

    # A fresh <time>-<name> folder, made atomically as a run's is: two sessions never share it.
    pid_dir = new_dir(None, root(runs_dir), name)
    path = pid_dir.with_suffix(RECORD_SUFFIX)
    steps = step_entries(specs)
    write(path, {"schema": SCHEMA, "id": pid_dir.name, "name": name, "model": model,
                 "background": background, "status": "queued", "current": None,
                 "created_at": files.now_iso(), "started_at": None, "finished_at": None,
                 "error": None, "steps": steps})  # fmt: skip
    return path


def step_entries(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The record's steps for these specs, each pending."""
    return [{"kind": s["kind"], "spec": s, "state": "pending", "run": None, "run_dir": None,
             "summary": None, "started_at": None, "finished_at": None, "error": None}
            for s in specs]  # fmt: skip


def read(path: Path) -> dict[str, Any]:
    record = files.read_json(path)
    if not _is_record(record):
        raise FileNotFoundError(f"{path} is not a pipeline record (pipelines/<id>.json).")
    return record


def write(path: Path, record: dict[str, Any]) -> None:
    files.write_json(path, record)


def update(path: Path, **changes: Any) -> dict[str, Any]:
    record = {**read(path), **changes}
    write(path, record)
    return record


def update_step(path: Path, index: int, **changes: Any) -> dict[str, Any]:
    record = read(path)
    record["steps"][index] = {**record["steps"][index], **changes}
    write(path, record)
    return record


def resolve(x: Any, runs_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """The record a pipeline reference names (a handle, a record path, its folder, or its id
    in the runs dir); None when `x` is none of these (e.g. a run)."""
    return resolve_record(x, root(runs_dir), _is_record)


def _is_record(record: Any) -> bool:
    return isinstance(record, dict) and isinstance(record.get("steps"), list)


def resolve_record(x: Any, home: Path, is_record: Callable[[Any], bool]) -> Path | None:
    """The record file `x` names (a handle with a `path`, a record path, the folder beside it,
    or an id in `home`) whose JSON `is_record` accepts; None otherwise. Shared by the
    pipelines' and the sweeps' records."""
    path = getattr(x, "path", None) if not isinstance(x, str | os.PathLike) else x
    if not isinstance(path, str | os.PathLike):
        return None
    p = Path(path).expanduser()
    candidates = [p, p.with_suffix(RECORD_SUFFIX)] if p.suffix != RECORD_SUFFIX else [p]
    if p.name == str(path):  # a bare id
        candidates.append(home / f"{p.name}{RECORD_SUFFIX}")
    for candidate in candidates:
        if candidate.suffix == RECORD_SUFFIX and candidate.is_file():
            try:
                if is_record(files.read_json(candidate)):
                    return candidate.resolve()
            except (OSError, ValueError):
                continue
    return None


def find(x: Any, runs_dir: str | os.PathLike[str] | None = None) -> Path:
    """`resolve`, or a FileNotFoundError that says where it looked."""
    found = resolve(x, runs_dir)
    if found is None:
        raise FileNotFoundError(
            f"No pipeline {x!r}: pass a pipeline handle, its id or its record "
            f"({root(runs_dir)}/<id>.json)."
        )
    return found


def run_dirs(record: dict[str, Any]) -> list[Path]:
    """The runs the pipeline's steps trained, in step order."""
    return [Path(s["run_dir"]) for s in record["steps"] if s.get("run_dir")]


def _alive(record: dict[str, Any], path: Path) -> bool:
    if record.get("background"):
        return job(path).status().get("state") in ACTIVE
    if record.get("pid") is None:  # created, its process not recorded yet
        return True
    return jobs.process_alive(record)


def live(path: Path) -> dict[str, Any]:
    """The record; one still active whose process is gone is failed (written back)."""
    record = read(path)
    if record.get("status") not in ACTIVE or _alive(record, path):
        return record
    record = read(path)  # its process may have written its final state just before it ended
    if record.get("status") not in ACTIVE:
        return record
    status = job(path).status() if record.get("background") else {}
    tail = status.get("log_tail") or files.read_tail(log_path(path), 20)
    error = status.get("error") or (
        f"The process running pipeline {record['id']} (pid {record.get('pid')}) is gone but the "
        "pipeline was still running: it was killed or crashed. See the log tail; resume it with "
        "dragon.resume_pipeline(id)."
    )
    for step in record["steps"]:
        if step["state"] == "running":
            step.update(state="failed", error="interrupted", finished_at=files.now_iso())
    record.update(status="failed", error=error, log_tail=tail, finished_at=files.now_iso())
    write(path, record)
    return record
