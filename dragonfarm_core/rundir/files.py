"""The run-directory contract: every file name of a run and of a job, and every read and write.

A run is a directory, and its files are the protocol between the app, the trainer subprocess,
the inference worker, a second browser and a later Python session. Background work on a run
other than its training (an evaluation recompute, and next a merge, an export...) is a job with
a folder of its own under the run's `jobs/` (JOBS_DIR, see `new_job_dir`); a job's status.json
has the run's format and its output goes to `job.log`. This is the only module that names
those files. JSON files are written atomically and `progress.jsonl` is append-only (`atomic`);
non-finite numbers are written as null.

config.json is read through `read_config`, which checks its shape (`config_schema`) and raises
ConfigDamagedError saying what is wrong; such a run (its status.json beside it) stays a run,
reported as state DAMAGED.

status.json is read through `read_status`, which checks it (`status_schema`): an unreadable
file (truncated, not UTF-8, not JSON, not an object) or one whose fields have the wrong type
(a state that is not one of STATES, a step that is not a whole number) is read again a few
times, since the atomic writer makes a torn file at most a momentary oddity (a copy in flight,
a network file system), and then reported as state DAMAGED with an `error` that says what is
wrong and what to do. DAMAGED is never written to disk; it is neither active nor terminal, so
nothing waits on such a run and nothing resumes it on its own; a writer replaces the damaged
file whole. Each status read also removes the temp files killed writers left in the folder.

A checkpoint counts only once its COMPLETE marker is in it: the marker is written last, after
every other file is on disk, and removed first when the checkpoint is pruned, so a save or a
prune cut short by a kill never leaves a checkpoint that looks complete.
Pure standard library: the trainer and the app both import it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# Re-exported: the rest of the code reads and writes run files through this module only.
from dragonfarm_core.rundir.atomic import TEMP_STALE_S as TEMP_STALE_S
from dragonfarm_core.rundir.atomic import append_jsonl as append_jsonl
from dragonfarm_core.rundir.atomic import dumps as dumps
from dragonfarm_core.rundir.atomic import read_json as read_json
from dragonfarm_core.rundir.atomic import read_jsonl as read_jsonl
from dragonfarm_core.rundir.atomic import read_jsonl_checked as read_jsonl_checked
from dragonfarm_core.rundir.atomic import remove_stale_temps as remove_stale_temps
from dragonfarm_core.rundir.atomic import write_json as write_json
from dragonfarm_core.rundir.atomic import write_jsonl as write_jsonl
from dragonfarm_core.rundir.config_schema import ConfigDamagedError as ConfigDamagedError
from dragonfarm_core.rundir.config_schema import config_problem
from dragonfarm_core.rundir.status_schema import ACTIVE_STATES as ACTIVE_STATES
from dragonfarm_core.rundir.status_schema import DAMAGED as DAMAGED
from dragonfarm_core.rundir.status_schema import FINISHING as FINISHING
from dragonfarm_core.rundir.status_schema import STATES as STATES
from dragonfarm_core.rundir.status_schema import TERMINAL_STATES as TERMINAL_STATES
from dragonfarm_core.rundir.status_schema import parse_status

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
# The trainer's tokenized rows (Arrow files, trainers/token_cache.py): derived from data/ and
# the tokenizer, so never copied with a run (bundles take data/ and rewards/ only).
TOKEN_CACHE_DIR = ".cache/tokens"
ADAPTER_DIR = "adapter"
CHECKPOINTS_DIR = "checkpoints"
CHECKPOINT_PREFIX = "checkpoint-"
# A checkpoint is written under this prefix, then renamed: a half-written one is never seen.
CHECKPOINT_TEMP_PREFIX = ".tmp-"
# Written last into a checkpoint folder; only a folder that has it is a checkpoint.
CHECKPOINT_COMPLETE = "COMPLETE"
EVAL = "eval.json"
SAMPLES = "samples.json"
MERGED_DIR = "merged"
JUDGE = "judge.json"
METRICS = "metrics.json"
# Custom reward files are copied here, so a GRPO run stays self-contained.
REWARDS_DIR = "rewards"
# Jobs on a run (<run>/jobs/<kind>-<time>/): each holds a STATUS, a JOB_LOG and, when asked,
# a CANCEL_REQUEST. Never a run file: nothing reads a job's files as the run's.
JOBS_DIR = "jobs"
JOB_LOG = "job.log"

ARCHIVED_DIR = "archived"
FEEDBACK_DIR = "feedback"
PIPELINES_DIR = "pipelines"
# Sweeps (dragon.sweep): <id>.json records and their folders (Optuna's study.db, the job).
SWEEPS_DIR = "sweeps"
# Files uploaded through the app are copied here, so the code it shows keeps working.
UPLOADS_DIR = "uploads"
# A folder the old per-runs-dir queue kept its lock in; still never a run.
LOCKS_DIR = ".locks"
# The response cache of judges and teachers (dragonfarm_core.llm): one JSON file per answer.
LLM_CACHE_DIR = "llm_cache"
# Data written by synthesize() and synthesize_pairs(): <name>-<time>.jsonl and its record.
SYNTHETIC_DIR = "synthetic"
# Chat transcripts the app's Chat tab saves (Chat.save), kept with the user's runs.
CHATS_DIR = "chats"
# Names in runs_dir that are never runs.
RESERVED = frozenset(
    {ARCHIVED_DIR, FEEDBACK_DIR, PIPELINES_DIR, SWEEPS_DIR, UPLOADS_DIR, JOBS_DIR, LOCKS_DIR,
     LLM_CACHE_DIR, SYNTHETIC_DIR, CHATS_DIR}
)  # fmt: skip

# How often, and how far apart, read_status reads a status.json that does not parse.
STATUS_READ_TRIES = 3
STATUS_RETRY_S = 0.05


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


# --- config.json -----------------------------------------------------------------------------


def read_config(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """config.json, checked (`config_schema`): FileNotFoundError when there is none,
    ConfigDamagedError (a ValueError) saying what is wrong and what to do when it cannot be
    read as a run's (not UTF-8, not JSON, not an object, a field of the wrong type)."""
    path = Path(run_dir) / CONFIG
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"{run_dir} is not a run directory: it has no {CONFIG}.") from None
    try:
        config: Any = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        problem: str | None = f"byte {e.start} is not UTF-8 text"
    except json.JSONDecodeError as e:
        problem = f"it is not valid JSON ({e.msg}: line {e.lineno}, column {e.colno})"
    else:
        problem = config_problem(config)
    if problem is not None:
        raise ConfigDamagedError(
            f"{path} is damaged: {problem}. The run's settings cannot be read from it: put "
            "config.json back from a copy, or delete the run (dragon.delete_run)."
        )
    return config


def write_config(run_dir: str | os.PathLike[str], config: dict[str, Any]) -> None:
    write_json(Path(run_dir) / CONFIG, config)


def is_run_dir(path: str | os.PathLike[str]) -> bool:
    """A folder whose config.json is a run's (a model folder has a config.json too), or a run
    whose config.json is damaged: one that is not a run's, beside a run's status.json (it is
    listed, as damaged, so it can be looked at and deleted)."""
    path = Path(path)
    if not (path / CONFIG).is_file():
        return False
    try:
        config = read_json(path / CONFIG)
    except (OSError, ValueError):  # unreadable
        config = None
    if isinstance(config, dict) and "method" in config and "schema" in config:
        return True
    return (path / STATUS).is_file()


def damaged_config_status(problem: ConfigDamagedError) -> dict[str, Any]:
    """The status reported for a run whose config.json cannot be read as one."""
    return {"state": DAMAGED, "error": str(problem)}


# --- status.json, of a run or of a job ---------------------------------------------------------


def _load_status(path: Path) -> tuple[dict[str, Any], str | None]:
    """(status, None), or ({}, what is wrong with the file). A missing file is an empty status."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}, None
    except OSError as e:
        return {}, f"it cannot be read ({e.strerror or e})"
    return parse_status(data)


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
    problem = "it cannot be read"
    for attempt in range(STATUS_READ_TRIES):
        status, found = _load_status(path)
        if found is None:
            return status
        problem = found
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


def request_cancel(run_dir: str | os.PathLike[str]) -> None:
    (Path(run_dir) / CANCEL_REQUEST).write_text(now_iso(), encoding="utf-8")


def cancel_requested(run_dir: str | os.PathLike[str]) -> bool:
    return (Path(run_dir) / CANCEL_REQUEST).exists()


def clear_cancel(run_dir: str | os.PathLike[str]) -> None:
    (Path(run_dir) / CANCEL_REQUEST).unlink(missing_ok=True)


# --- progress.jsonl and the log ------------------------------------------------------------------


def append_progress(run_dir: str | os.PathLike[str], row: dict[str, Any]) -> None:
    append_jsonl(Path(run_dir) / PROGRESS, row)


def read_progress(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The logged rows; a torn or garbled line anywhere is skipped (the file is only shown)."""
    return read_jsonl(Path(run_dir) / PROGRESS, tolerant=True)


def write_progress(run_dir: str | os.PathLike[str], rows: list[dict[str, Any]]) -> None:
    """Replace progress.jsonl as a whole; only for resume, while no trainer is running."""
    write_jsonl(Path(run_dir) / PROGRESS, rows)


def log_path(run_dir: str | os.PathLike[str]) -> Path:
    """The trainer's log, train.log."""
    return Path(run_dir) / LOG


def read_log_tail(run_dir: str | os.PathLike[str], n: int = 50) -> list[str]:
    """The last n lines of the trainer log (reads only the end of a large file)."""
    return read_tail(log_path(run_dir), n)


def read_tail(path: str | os.PathLike[str], n: int = 50) -> list[str]:
    """The last n lines of a log file (a run's or a job's); [] when there is none."""
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


# --- data, adapter, evaluation -------------------------------------------------------------------


def data_path(run_dir: str | os.PathLike[str], split: str) -> Path:
    """data/train.jsonl or data/eval.jsonl."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}.")
    return Path(run_dir) / (TRAIN_DATA if split == "train" else EVAL_DATA)


def token_cache_dir(run_dir: str | os.PathLike[str]) -> Path:
    return Path(run_dir) / TOKEN_CACHE_DIR


def adapter_dir(run_dir: str | os.PathLike[str]) -> Path:
    return Path(run_dir) / ADAPTER_DIR


def write_eval(run_dir: str | os.PathLike[str], value: dict[str, Any]) -> None:
    write_json(Path(run_dir) / EVAL, value)


def read_record(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """A JSON object a job or an export left to be shown (a check, a result, a registration);
    None when it is missing, torn by a killed writer, or not an object: a reader shows less,
    never fails on it."""
    try:
        value = read_json(path)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def read_eval(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    return read_json(Path(run_dir) / EVAL)


def write_samples(run_dir: str | os.PathLike[str], samples: list[dict[str, Any]]) -> None:
    write_json(Path(run_dir) / SAMPLES, samples)


def read_samples(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]] | None:
    return read_json(Path(run_dir) / SAMPLES)


# --- checkpoints ---------------------------------------------------------------------------------


def checkpoint_dir(run_dir: str | os.PathLike[str], step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS_DIR / f"{CHECKPOINT_PREFIX}{step}"


def checkpoint_temp_dir(run_dir: str | os.PathLike[str], step: int) -> Path:
    """Where a checkpoint is written before its rename to checkpoint-<step> makes it visible."""
    return Path(run_dir) / CHECKPOINTS_DIR / f"{CHECKPOINT_TEMP_PREFIX}{CHECKPOINT_PREFIX}{step}"


def checkpoint_temp_dirs(run_dir: str | os.PathLike[str]) -> list[Path]:
    """Half-written checkpoints left by a killed trainer."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return []
    return [p for p in root.iterdir() if p.name.startswith(CHECKPOINT_TEMP_PREFIX)]


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


# --- jobs: <run>/jobs/<kind>-<time>/ (status.json, job.log, cancel.request) ------------------


def job_log_path(job_dir: str | os.PathLike[str]) -> Path:
    """A job's stdout and stderr, job.log."""
    return Path(job_dir) / JOB_LOG


def _job_order(path: Path) -> tuple[str, int, str]:
    """jobs/<kind>-<YYYYMMDD>-<HHMMSS>[-<n>] sorts by its time, then n (oldest first)."""
    parts = path.name.split("-")
    n = parts[3] if len(parts) > 3 else "1"
    return "-".join(parts[1:3]), int(n) if n.isdigit() else 0, path.name


def job_dirs(run_dir: str | os.PathLike[str], kind: str | None = None) -> list[Path]:
    """The run's job folders (of `kind` when given), oldest first."""
    root = Path(run_dir) / JOBS_DIR
    if not root.is_dir():
        return []
    found = [
        p
        for p in root.iterdir()
        if p.is_dir() and not p.is_symlink() and (kind is None or p.name.startswith(f"{kind}-"))
    ]
    return sorted(found, key=_job_order)


def new_job_dir(run_dir: str | os.PathLike[str], kind: str) -> Path:
    """Create a fresh folder for a job of `kind` on the run: jobs/<kind>-<UTC time>[-<n>]."""
    if not kind.isidentifier():
        raise ValueError(f"A job kind is a plain word (letters, digits, _), got {kind!r}.")
    root = Path(run_dir) / JOBS_DIR
    root.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        path = root / (f"{kind}-{stamp}" if n == 1 else f"{kind}-{stamp}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{root} has no free name for a {kind} job at {stamp}.")
