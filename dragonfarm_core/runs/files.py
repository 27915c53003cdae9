"""The run-directory contract: every file name of a run, and every read and write of them.

A run is a directory, and its files are the protocol between the app, the trainer subprocess,
the inference worker, a second browser and a later Python session. This is the only module that
names those files. JSON files are written atomically (temp file in the same folder, fsync,
replace), so a reader never sees half a file; `progress.jsonl` is append-only and its reader
tolerates a torn last line (a writer killed mid-line). Non-finite numbers are written as null.
Pure standard library: the trainer and the app both import it.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
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


def now_iso() -> str:
    """UTC time as ISO-8601 with seconds, the one time format in run files."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def parse_iso(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


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


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every complete row; a torn or garbled last line (writer killed mid-write) is skipped."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        return []
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i >= len(lines) - 2:  # the last line, possibly followed by "" after a newline
                continue
            raise
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


# --- Per-file accessors: the rest of the code calls these, never the names above directly. ---


def read_config(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    config = read_json(Path(run_dir) / CONFIG)
    if config is None:
        raise FileNotFoundError(f"{run_dir} is not a run directory: it has no {CONFIG}.")
    return config


def write_config(run_dir: str | os.PathLike[str], config: dict[str, Any]) -> None:
    write_json(Path(run_dir) / CONFIG, config)


def read_status(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    return read_json(Path(run_dir) / STATUS, default={}) or {}


def write_status(run_dir: str | os.PathLike[str], status: dict[str, Any]) -> None:
    write_json(Path(run_dir) / STATUS, status)


def update_status(run_dir: str | os.PathLike[str], **changes: Any) -> dict[str, Any]:
    """Read, change and atomically rewrite status.json; returns the new status.

    Only one process writes a run's status at a time (the launcher until the trainer starts,
    then the trainer; the launcher again only after the trainer's process is gone), so a
    read-modify-write needs no lock.
    """
    status = read_status(run_dir)
    status.update(changes)
    write_status(run_dir, status)
    return status


def append_progress(run_dir: str | os.PathLike[str], row: dict[str, Any]) -> None:
    append_jsonl(Path(run_dir) / PROGRESS, row)


def read_progress(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    return read_jsonl(Path(run_dir) / PROGRESS)


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


def checkpoints(run_dir: str | os.PathLike[str]) -> list[Path]:
    """Complete checkpoints, oldest first. In-progress ones have a temp name and are skipped."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        suffix = p.name.removeprefix(CHECKPOINT_PREFIX)
        if p.is_dir() and p.name.startswith(CHECKPOINT_PREFIX) and suffix.isdigit():
            found.append((int(suffix), p))
    return [p for _, p in sorted(found)]


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
