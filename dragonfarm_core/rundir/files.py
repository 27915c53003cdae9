"""The run-directory contract: every file name of a run, and every read and write of them.

A run is a directory, and its files are the protocol between the app, the trainer subprocess,
the inference worker, a second browser and a later Python session. This is the only module that
names those files. JSON files are written atomically (temp file in the same folder, fsync,
replace), so a reader never sees half a file; `progress.jsonl` is append-only and its reader
skips a torn or garbled line (a writer killed mid-line). Non-finite numbers are written as null.
A temp file that a killed writer left behind (`.<name>.<random>.tmp`) is removed once it is
TEMP_STALE_S old, by the next write in its folder or the next status read of its run.

status.json is read through `read_status`, which checks it: an unreadable file (truncated,
not UTF-8, not JSON, not an object) or one whose fields have the wrong type (a state that is
not one of STATES, a step that is not a whole number) is read again a few times, since the
atomic writer makes a torn file at most a momentary oddity (a copy in flight, a network file
system), and then reported as state DAMAGED with an `error` that says what is wrong and what
to do. DAMAGED is never written to disk; it is neither active nor terminal, so nothing waits
on such a run and nothing resumes it on its own; a writer replaces the damaged file whole.

A checkpoint counts only once its COMPLETE marker is in it: the marker is written last, after
every other file is on disk, and removed first when the checkpoint is pruned, so a save or a
prune cut short by a kill never leaves a checkpoint that looks complete.
Pure standard library: the trainer and the app both import it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

CONFIG = "config.json"
STATUS = "status.json"
PROGRESS = "progress.jsonl"
LOG = "train.log"
CANCEL_REQUEST = "cancel.request"
DATA_DIR = "data"
TRAIN_DATA = "data/train.jsonl"
EVAL_DATA = "data/eval.jsonl"
# A dataset that had no file (a DataFrame, a list of conversations) is saved here, so the
# run stays reproducible: config.json's dataset spec then names this file as its source.
SOURCE_DATA = "data/source.jsonl"
ADAPTER_DIR = "adapter"
CHECKPOINTS_DIR = "checkpoints"
CHECKPOINT_PREFIX = "checkpoint-"
# Written last into a checkpoint folder; only a folder that has it is a checkpoint.
CHECKPOINT_COMPLETE = "COMPLETE"
EVAL = "eval.json"
SAMPLES = "samples.json"
MERGED_DIR = "merged"
JUDGE = "judge.json"
METRICS = "metrics.json"
# Custom reward files are copied here, so a GRPO run stays self-contained.
REWARDS_DIR = "rewards"

ARCHIVED_DIR = "archived"
FEEDBACK_DIR = "feedback"
PIPELINES_DIR = "pipelines"
# Files uploaded through the app are copied here, so the code it shows keeps working.
UPLOADS_DIR = "uploads"
# Names in runs_dir that are never runs.
RESERVED = frozenset({ARCHIVED_DIR, FEEDBACK_DIR, PIPELINES_DIR, UPLOADS_DIR, ".locks"})

STATES = ("queued", "running", "succeeded", "failed", "cancelled", "bundled")
TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})
ACTIVE_STATES = frozenset({"queued", "running"})
# Reported by read_status for a status.json that cannot be read as a status; never written.
DAMAGED = "damaged"
# The type each known status field must have when present (None is always allowed).
_WHOLE = ("pid", "step", "total_steps", "params_trainable", "params_total", "truncated_rows")
_TEXT = ("queued_at", "started_at", "finished_at", "heartbeat", "reason", "error", "device",
         "dtype", "queue", "resumed_from")  # fmt: skip
STATUS_FIELDS: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(_WHOLE, (int,)),
    **dict.fromkeys(("pid_create_time", "queued_ts", "epoch"), (int, float)),
    **dict.fromkeys(_TEXT, (str,)),
    "metrics": (dict,),
    "log_tail": (list,),
}
# How often, and how far apart, read_status reads a status.json that does not parse.
STATUS_READ_TRIES = 3
STATUS_RETRY_S = 0.05
# A writer's temp file older than this is a leftover of a killed writer, not one in progress
# (a writer holds its temp file for the time of one write and one fsync).
TEMP_STALE_S = 120.0


def now_iso() -> str:
    """UTC time as ISO-8601 with seconds, the one time format in run files."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def parse_iso(value: str | None) -> datetime | None:
    """An ISO-8601 time as an aware datetime (a time without a zone is taken as UTC, so two
    times always compare); None for anything else."""
    if not value or not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _finite(value: Any) -> Any:
    """Replace NaN and infinities by None, recursively, so the JSON stays standard."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def dumps(value: Any, indent: int | None = None) -> str:
    return json.dumps(_finite(value), indent=indent, ensure_ascii=False, allow_nan=False)


def _is_temp_name(name: str) -> bool:
    """`.<name>.<random>.tmp`, the name write_json and write_jsonl give their temp file (a
    dot-folder such as .locks, or .tmp-adapter, is not one)."""
    return name.startswith(".") and name.endswith(".tmp") and name.count(".") >= 3


def remove_stale_temps(folder: str | os.PathLike[str], older_than: float = TEMP_STALE_S) -> None:
    """Remove the temp files killed writers left in `folder` (files only, `older_than` s old).

    A temp file is only ever written by the process that created it, within one write call,
    so one this old belongs to nobody; a younger one may be a write in progress and stays.
    """
    try:
        entries = list(os.scandir(folder))
    except OSError:  # no folder, or not ours to list
        return
    cutoff = time.time() - older_than
    for entry in entries:
        if not _is_temp_name(entry.name):
            continue
        try:
            if entry.is_file(follow_symlinks=False) and entry.stat().st_mtime < cutoff:
                os.unlink(entry.path)
        except OSError:  # gone already, or a read-only copy of a run: leave it
            continue


def write_json(path: str | os.PathLike[str], value: Any) -> None:
    """Write JSON atomically: a reader sees the old file or the new one, never a mix."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(dumps(value, indent=2))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    remove_stale_temps(path.parent)


def read_json(path: str | os.PathLike[str], default: Any = None) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return default


def append_jsonl(path: str | os.PathLike[str], row: dict[str, Any]) -> None:
    """Append one row; one write call per line keeps concurrent readers safe."""
    line = dumps(row) + "\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()


def read_jsonl(path: str | os.PathLike[str], tolerant: bool = False) -> list[dict[str, Any]]:
    """Every complete row; a torn or garbled last line (writer killed mid-write) is skipped.

    tolerant: skip any line that is not a JSON object (and read bytes that are not UTF-8 as
    U+FFFD), for files that are only shown, such as progress.jsonl; otherwise a garbled line
    before the last raises.
    """
    try:
        with open(path, encoding="utf-8", errors="replace" if tolerant else "strict") as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        return []
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if tolerant or i >= len(lines) - 2:  # the last line, maybe followed by ""
                continue
            raise
        if isinstance(row, dict) or not tolerant:
            rows.append(row)
    return rows


def write_jsonl(path: str | os.PathLike[str], rows: list[dict[str, Any]]) -> None:
    """Write a whole JSONL file atomically (data files)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    remove_stale_temps(path.parent)


# --- Per-file accessors: the rest of the code calls these, never the names above directly. ---


def read_config(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    config = read_json(Path(run_dir) / CONFIG)
    if config is None:
        raise FileNotFoundError(f"{run_dir} is not a run directory: it has no {CONFIG}.")
    return config


def write_config(run_dir: str | os.PathLike[str], config: dict[str, Any]) -> None:
    write_json(Path(run_dir) / CONFIG, config)


_KIND_NAMES = {int: "a whole number", float: "a number", str: "a string", dict: "an object",
              list: "a list"}  # fmt: skip


def status_problem(status: Any) -> str | None:
    """What makes `status` not a status (wrong shape, unknown state, a field of the wrong
    type), as the end of a sentence; None when it is fine."""
    if not isinstance(status, dict):
        return f"it holds a JSON {type(status).__name__}, not an object"
    state = status.get("state")
    if state not in STATES:
        got = "no state" if state is None else f"the state {state!r:.40}"
        return f"it names {got}, not one of {', '.join(STATES)}"
    for key, kinds in STATUS_FIELDS.items():
        value = status.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, kinds):
            wanted = " or ".join(_KIND_NAMES[k] for k in kinds)
            return f"its {key} is {value!r:.40}, not {wanted}"
    return None


def _load_status(path: Path) -> tuple[dict[str, Any], str | None]:
    """(status, None), or ({}, what is wrong with the file). A missing file is an empty status."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}, None
    except OSError as e:
        return {}, f"it cannot be read ({e.strerror or e})"
    if not data.strip():
        return {}, "it is empty"
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        return {}, f"byte {e.start} is not UTF-8 text"
    except json.JSONDecodeError as e:
        return {}, f"it is not valid JSON ({e.msg}: line {e.lineno}, column {e.colno})"
    problem = status_problem(value)
    return (value, None) if problem is None else ({}, problem)


def damaged_status(run_dir: str | os.PathLike[str], problem: str) -> dict[str, Any]:
    """The status reported for a status.json that cannot be read as one."""
    path = Path(run_dir) / STATUS
    return {
        "state": DAMAGED,
        "error": (
            f"{STATUS} is damaged: {problem}. A running trainer rewrites it within seconds; "
            f"if the run is not training any more, delete {path} and resume the run "
            "(dragon.resume(run)), or delete the run."
        ),
    }


def read_status(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """status.json, checked: {} when there is none, a DAMAGED status when it cannot be read.

    A file that does not parse is read again STATUS_READ_TRIES times before it is called
    damaged: the writer replaces it atomically, so a bad read is momentary or it is real damage.
    """
    remove_stale_temps(run_dir)
    path = Path(run_dir) / STATUS
    for attempt in range(STATUS_READ_TRIES):
        status, problem = _load_status(path)
        if problem is None:
            return status
        if attempt + 1 < STATUS_READ_TRIES:
            time.sleep(STATUS_RETRY_S)
    return damaged_status(run_dir, problem)


def write_status(run_dir: str | os.PathLike[str], status: dict[str, Any]) -> None:
    write_json(Path(run_dir) / STATUS, status)


def update_status(run_dir: str | os.PathLike[str], **changes: Any) -> dict[str, Any]:
    """Read, change and atomically rewrite status.json; returns the new status.

    Only one process writes a run's status at a time (the launcher until the trainer starts,
    then the trainer; the launcher again only after the trainer's process is gone), so a
    read-modify-write needs no lock. A damaged status.json is replaced by `changes` alone.
    """
    status = read_status(run_dir)
    if status.get("state") == DAMAGED:
        status = {}
    status.update(changes)
    write_status(run_dir, status)
    return status


def append_progress(run_dir: str | os.PathLike[str], row: dict[str, Any]) -> None:
    append_jsonl(Path(run_dir) / PROGRESS, row)


def read_progress(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The logged rows; a torn or garbled line anywhere is skipped (the file is only shown)."""
    return read_jsonl(Path(run_dir) / PROGRESS, tolerant=True)


def read_log_tail(run_dir: str | os.PathLike[str], n: int = 50) -> list[str]:
    """The last n lines of the trainer log (reads only the end of a large file)."""
    path = Path(run_dir) / LOG
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max(4096, n * 400)))
            data = f.read()
    except FileNotFoundError:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines[-n:] if n > 0 else []


def request_cancel(run_dir: str | os.PathLike[str]) -> None:
    (Path(run_dir) / CANCEL_REQUEST).write_text(now_iso(), encoding="utf-8")


def cancel_requested(run_dir: str | os.PathLike[str]) -> bool:
    return (Path(run_dir) / CANCEL_REQUEST).exists()


def clear_cancel(run_dir: str | os.PathLike[str]) -> None:
    (Path(run_dir) / CANCEL_REQUEST).unlink(missing_ok=True)


def _checkpoint_dirs(run_dir: str | os.PathLike[str]) -> list[Path]:
    """Every checkpoint-<step> folder, complete or not, oldest first."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        suffix = p.name.removeprefix(CHECKPOINT_PREFIX)
        if p.is_dir() and p.name.startswith(CHECKPOINT_PREFIX) and suffix.isdigit():
            found.append((int(suffix), p))
    return [p for _, p in sorted(found)]


def checkpoint_complete(path: str | os.PathLike[str]) -> bool:
    return (Path(path) / CHECKPOINT_COMPLETE).is_file()


def checkpoints(run_dir: str | os.PathLike[str]) -> list[Path]:
    """Complete checkpoints (COMPLETE marker in them), oldest first.

    In-progress ones have a temp name, half-pruned ones have lost their marker: both are
    skipped. A checkpoint written before the marker existed has none either and is skipped:
    a half-pruned one cannot be told from it, and resuming from half a checkpoint is worse
    than starting over.
    """
    return [p for p in _checkpoint_dirs(run_dir) if checkpoint_complete(p)]


def incomplete_checkpoints(run_dir: str | os.PathLike[str]) -> list[Path]:
    """checkpoint-<step> folders without a COMPLETE marker: a prune cut short, or pre-marker."""
    return [p for p in _checkpoint_dirs(run_dir) if not checkpoint_complete(p)]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def mark_checkpoint_complete(path: str | os.PathLike[str]) -> None:
    """Write the COMPLETE marker, last, once every other file of the checkpoint is on disk."""
    marker = Path(path) / CHECKPOINT_COMPLETE
    with open(marker, "w", encoding="utf-8") as f:
        f.write(now_iso() + "\n")
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(marker.parent)


def remove_checkpoint(path: str | os.PathLike[str]) -> None:
    """Prune a checkpoint: its marker first (and that on disk), then the rest, so a kill
    in between leaves a folder that no reader counts as a checkpoint."""
    path = Path(path)
    marker = path / CHECKPOINT_COMPLETE
    if marker.exists():
        marker.unlink()
        _fsync_dir(path)
    shutil.rmtree(path, ignore_errors=True)


def checkpoint_dir(run_dir: str | os.PathLike[str], step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS_DIR / f"{CHECKPOINT_PREFIX}{step}"


def is_run_dir(path: str | os.PathLike[str]) -> bool:
    """A folder whose config.json is a run's (a model folder has a config.json too)."""
    path = Path(path) / CONFIG
    if not path.is_file():
        return False
    try:
        config = read_json(path)
    except (OSError, ValueError):  # unreadable: not listed as a run, left as it is
        return False
    return isinstance(config, dict) and "method" in config and "schema" in config


# --- Added for the launcher and resume. ---

LOCKS_DIR = ".locks"
QUEUE_LOCK = "queue.lock"


def queue_lock_path(runs_dir: str | os.PathLike[str]) -> Path:
    """The lock file that makes a queued -> running transition atomic within a runs dir."""
    return Path(runs_dir) / LOCKS_DIR / QUEUE_LOCK


def write_progress(run_dir: str | os.PathLike[str], rows: list[dict[str, Any]]) -> None:
    """Replace progress.jsonl as a whole; only for resume, while no trainer is running."""
    write_jsonl(Path(run_dir) / PROGRESS, rows)


def log_path(run_dir: str | os.PathLike[str]) -> Path:
    return Path(run_dir) / LOG


def adapter_dir(run_dir: str | os.PathLike[str]) -> Path:
    return Path(run_dir) / ADAPTER_DIR


# --- Added for the trainers. ---

CHECKPOINT_TEMP_PREFIX = ".tmp-"


def data_path(run_dir: str | os.PathLike[str], split: str) -> Path:
    """data/train.jsonl or data/eval.jsonl."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}.")
    return Path(run_dir) / (TRAIN_DATA if split == "train" else EVAL_DATA)


def checkpoint_temp_dir(run_dir: str | os.PathLike[str], step: int) -> Path:
    """Where a checkpoint is written before its rename to checkpoint-<step> makes it visible."""
    return Path(run_dir) / CHECKPOINTS_DIR / f"{CHECKPOINT_TEMP_PREFIX}{CHECKPOINT_PREFIX}{step}"


def checkpoint_temp_dirs(run_dir: str | os.PathLike[str]) -> list[Path]:
    """Half-written checkpoints left by a killed trainer."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return []
    return [p for p in root.iterdir() if p.name.startswith(CHECKPOINT_TEMP_PREFIX)]


def write_eval(run_dir: str | os.PathLike[str], value: dict[str, Any]) -> None:
    write_json(Path(run_dir) / EVAL, value)


def read_eval(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    return read_json(Path(run_dir) / EVAL)


def write_samples(run_dir: str | os.PathLike[str], samples: list[dict[str, Any]]) -> None:
    write_json(Path(run_dir) / SAMPLES, samples)


def read_samples(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]] | None:
    return read_json(Path(run_dir) / SAMPLES)
