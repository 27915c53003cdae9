"""The runs directory as a table, and moving runs out of the way: archive, unarchive, delete.

Archiving moves a run's folder under `archived/` in its runs directory, with every file kept;
unarchiving moves it back exactly as it was. Deleting removes it for good. Archive and delete
refuse a run that is queued or running or has a job in progress (an evaluation), and a run
that another run continues from (that run loads its adapter), unless `force=True`, which first
cancels what is active.
"""

from __future__ import annotations

import os
import shutil
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from dragonfarm_core.rundir import files, jobs, launch, location, refs
from dragonfarm_core.rundir.run import Run

COLUMNS = [
    "id",
    "name",
    "state",
    "model",
    "method",
    "started",
    "duration",
    "final_loss",
    "continued_from",
    "judge",
    "trained_on",
]
FORCE_CANCEL_TIMEOUT_S = 10


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _final_loss(run_dir: Path, status: dict[str, Any]) -> float | None:
    loss = (status.get("metrics") or {}).get("train_loss")
    if _is_number(loss):
        return loss
    losses = [r["loss"] for r in files.read_progress(run_dir) if _is_number(r.get("loss"))]
    return losses[-1] if losses else None


def _judge_label(summary: Any) -> str | None:
    """The latest judge() result that status.json holds, as one short text (judgement.py
    writes the label), e.g. "vs base: 12W 5T 3L (n=20)" or "score 7.2/10 (n=20)"."""
    label = summary.get("label") if isinstance(summary, dict) else None
    return label if isinstance(label, str) else None


def _trained_on(status: dict[str, Any]) -> str | None:
    """Where a run trained: "remote (cuda)" for imported results (results_import writes it),
    "here (cpu)" for a local run that started, None before either."""
    if isinstance(status.get("trained_on"), str):
        return str(status["trained_on"])
    return f"here ({status['device']})" if isinstance(status.get("device"), str) else None


def _row(run_dir: Path) -> dict[str, Any]:
    """One run's row. A damaged status.json or config.json shows as state "damaged" (neither
    read raises on it), a config.json that cannot be read leaving the config columns empty.
    Either way the run stays listed, so it can be looked at, archived or deleted."""
    status = launch.live_status(run_dir)
    try:
        config = files.read_config(run_dir)
    except files.ConfigDamagedError as e:
        config, status = {}, files.damaged_config_status(e)
    except OSError as e:  # gone or unreadable since run_dirs() listed it
        warnings.warn(
            f"Run {run_dir}: its {files.CONFIG} cannot be read ({e}); it is listed without "
            "its name, model and method.",
            stacklevel=4,
        )
        config = {}
    started = files.parse_iso(status.get("started_at"))
    finished = files.parse_iso(status.get("finished_at"))
    if started and not finished and status.get("state") == "running":
        finished = datetime.now(UTC)
    parent = config.get("continued_from")
    model = config.get("model")
    return {
        "id": config.get("id") or run_dir.name,
        "name": config.get("name"),
        "state": status.get("state"),
        "model": model.get("name") if isinstance(model, dict) else None,
        "method": config.get("method"),
        "started": pd.Timestamp(started) if started else pd.NaT,
        "duration": (finished - started).total_seconds() if started and finished else None,
        "final_loss": _final_loss(run_dir, status),
        "continued_from": Path(parent).name if isinstance(parent, str) and parent else None,
        "judge": _judge_label(status.get("judge")),
        "trained_on": _trained_on(status),
        "_created": str(config.get("created_at") or ""),
    }


def run_row(run_dir: Path) -> dict[str, Any]:
    """One run's row of the runs() table (COLUMNS, and `_created` to sort by), for the tables
    built on it (compare())."""
    return _row(run_dir)


def run_dirs(root: Path) -> list[Path]:
    """The run folders directly in `root`, as runs() lists them (in no particular order)."""
    return [
        child
        for child in (root.iterdir() if root.is_dir() else [])
        # A symlink is never listed: every action on it would be refused (refs.resolve_run
        # confines runs to this folder), and one into the folder would list a run twice.
        if child.name not in files.RESERVED and not child.is_symlink() and files.is_run_dir(child)
    ]


def _table(root: Path) -> pd.DataFrame:
    rows = [_row(child) for child in run_dirs(root)]
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in COLUMNS})
    frame = pd.DataFrame(rows).sort_values(["_created", "id"], ascending=False)
    frame["duration"] = pd.to_numeric(frame["duration"])
    frame["final_loss"] = pd.to_numeric(frame["final_loss"], errors="coerce")
    return frame[COLUMNS].reset_index(drop=True)


def runs(runs_dir: str | os.PathLike[str] | None = None) -> pd.DataFrame:
    """One row per run, newest first. `started` is a UTC time, `duration` is in seconds."""
    return _table(location.runs_dir(runs_dir))


def archived_runs(runs_dir: str | os.PathLike[str] | None = None) -> pd.DataFrame:
    """Runs that archive_run() moved out of the way; same columns as runs()."""
    return _table(location.runs_dir(runs_dir) / files.ARCHIVED_DIR)


def _given(runs_dir: Any) -> bool:
    """Whether a runs directory was passed (as location.runs_dir reads it: blank is none)."""
    return runs_dir is not None and bool(str(runs_dir).strip())


def _locate(run: Any, runs_dir: Any, archived: bool) -> Path:
    """A run's folder from a Run, a path, or an id (in runs_dir, then archived/ if allowed).

    With `runs_dir` given, only a run inside it counts: refs.resolve_run refuses a reference
    that resolves elsewhere (`..`, a path outside, a symlink out). Without it, any run folder's
    path is taken, as the manual says, and an id is looked up in the default runs directory."""
    if _given(runs_dir):
        return refs.resolve_run(run, runs_dir, archived=archived)
    if isinstance(run, Run):
        return run.dir
    if files.is_run_dir(run):
        return Path(run).expanduser().resolve()
    try:
        return refs.resolve_run(run, location.runs_dir(None), archived=archived)
    except refs.OutsideFolderError:  # a path, not an id: it is simply not a run
        raise FileNotFoundError(
            f"{run} is not a run directory: it has no {files.CONFIG}. "
            "dragon.runs() and dragon.archived_runs() list the runs."
        ) from None


def run_home(run_dir: Path) -> Path:
    """The runs directory a run belongs to (an archived run's is two levels up)."""
    parent = run_dir.parent
    return parent.parent if parent.name == files.ARCHIVED_DIR else parent


def dependents(run_dir: Path) -> list[str]:
    """Ids of runs (archived ones included) that continue from this one or load its adapter."""
    home, out = run_home(run_dir), []
    for root in (home, home / files.ARCHIVED_DIR):
        for child in sorted(root.iterdir()) if root.is_dir() else []:
            if child == run_dir or not files.is_run_dir(child):
                continue
            try:
                config = files.read_config(child)
            except (OSError, ValueError):  # a damaged run names no parent that can be read
                continue
            adapters = (config.get("model") or {}).get("adapters") or []
            linked = [config.get("continued_from"), *[str(Path(a).parent) for a in adapters]]
            if str(run_dir) in linked:
                out.append(child.name)
    return out


def _check_removable(run_dir: Path, force: bool, verb: str) -> None:
    state = launch.live_status(run_dir).get("state")
    if state in files.ACTIVE_STATES:
        if not force:
            raise RuntimeError(
                f"Run {run_dir.name} is {state}; cancel it first "
                f"(dragon.cancel(run)), or pass force=True to cancel and {verb} it."
            )
        launch.cancel_run(run_dir, timeout=FORCE_CANCEL_TIMEOUT_S)
    busy = jobs.active_jobs(run_dir)  # an evaluation reads the adapter: it would lose it
    if busy and not force:
        raise RuntimeError(
            f"Run {run_dir.name} has a job in progress ({busy[0].dir.name}, {busy[0].state}); "
            f"wait for it, or pass force=True to cancel it and {verb} the run."
        )
    for job in busy:
        job.cancel(timeout=FORCE_CANCEL_TIMEOUT_S)
    users = dependents(run_dir)
    if users and not force:
        raise RuntimeError(
            f"Run {run_dir.name} is the starting point of {', '.join(users)} "
            f"(they load its adapter); {verb} those first, or pass force=True."
        )


def archive_run(
    run: Any, runs_dir: str | os.PathLike[str] | None = None, force: bool = False
) -> str:
    """Move a run under archived/ in its runs directory, every file kept. Returns its id."""
    run_dir = _locate(run, runs_dir, archived=False)
    if run_dir.parent.name == files.ARCHIVED_DIR:
        raise ValueError(f"Run {run_dir.name} is already archived.")
    _check_removable(run_dir, force, "archive")
    target = run_dir.parent / files.ARCHIVED_DIR / run_dir.name
    if target.exists():
        raise FileExistsError(f"{target} already exists; delete or rename it first.")
    target.parent.mkdir(exist_ok=True)
    shutil.move(run_dir, target)
    return run_dir.name


def _archived_inside(id: Any, root: Path) -> Path:
    """The archived run `id` names, confined to `root` (refs.resolve_run): an id is looked up
    in archived/ first, so a run of the same id back in `root` does not hide it."""
    if isinstance(id, str) and len(Path(id).parts) == 1:
        source = refs.resolve_inside(Path(files.ARCHIVED_DIR) / id, root, "runs directory")
        if files.is_run_dir(source):
            return source
    try:
        return refs.resolve_run(id, root, archived=True)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"No archived run {str(id)!r} in {root / files.ARCHIVED_DIR}; "
            "dragon.archived_runs() lists them."
        ) from None


def unarchive_run(id: Any, runs_dir: str | os.PathLike[str] | None = None) -> str:
    """Move an archived run back exactly as it was. Returns its id."""
    if _given(runs_dir):
        source = _archived_inside(id, location.runs_dir(runs_dir))
    elif isinstance(id, Run) or files.is_run_dir(id):
        source = Path(id).resolve()
    else:
        source = location.runs_dir(runs_dir) / files.ARCHIVED_DIR / str(id)
    if source.parent.name != files.ARCHIVED_DIR or not files.is_run_dir(source):
        raise FileNotFoundError(
            f"No archived run {str(id)!r} in {source.parent}; dragon.archived_runs() lists them."
        )
    target = source.parent.parent / source.name
    if target.exists():
        raise FileExistsError(f"{target} already exists; move it away before unarchiving.")
    shutil.move(source, target)
    return source.name


def delete_run(
    run: Any, runs_dir: str | os.PathLike[str] | None = None, force: bool = False
) -> str:
    """Remove a run (active or archived) for good. Returns its id."""
    run_dir = _locate(run, runs_dir, archived=True)
    _check_removable(run_dir, force, "delete")
    shutil.rmtree(run_dir)
    return run_dir.name
