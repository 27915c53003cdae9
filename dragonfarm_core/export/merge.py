"""`merge()`: a finished run as a standalone model folder that loads with plain transformers.

    path = dragon.merge(run)                 # <run>/merged/, once the merge job has succeeded
    path = dragon.merge(run, out_dir="my-model")
    AutoModelForCausalLM.from_pretrained(path)   # no peft, no dragonfarm

The merge runs as a background job (`rundir.jobs`: folder <run>/jobs/merge-<time>/, process
`python -m dragonfarm_core.trainers.merge_run`, queued for the run's device like an
evaluation), so this process never imports torch. The job folds every adapter of the run's
chain into the base, in order (config.json's model.adapters, then the run's own adapter), saves
the weights (safetensors), config, tokenizer files, chat template and generation config, and
checks the result: the merged folder, loaded with plain transformers, must give the same
greedy token ids as base + adapters on a few held-out prompts. The check is written into the
folder as merge_check.json (`merge_check(path)` reads it); a mismatch fails the merge and
names the first differing token.

A merge is written atomically: into a temp folder beside the destination, every file fsynced,
the COMPLETE marker last, then renamed into place; an existing merged folder is replaced only
once the new one is complete. So a merged folder without the marker (or a temp folder a killed
merge left behind) is never taken as a merge, and the next merge removes it. Pure standard
library: the app and the merge job both import it.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dragonfarm_core.rundir import files, job_handle, jobs, queue
from dragonfarm_core.rundir.job_handle import JobHandle, ended_without, wait_or_stop, wait_status
from dragonfarm_core.rundir.run import Run, open_run

JOB_KIND = "merge"
MERGE_TIMEOUT_S = 3600.0
CANCEL_TIMEOUT_S = job_handle.CANCEL_TIMEOUT_S
# The check's record inside the merged folder, and the marker written last into it.
CHECK_FILE = "merge_check.json"
COMPLETE = files.CHECKPOINT_COMPLETE
# A merge in progress is written under this prefix beside its destination, then renamed.
TEMP_PREFIX = ".tmp-"
# An older merge moved aside while the new one takes its name (removed right after).
OLD_PREFIX = ".old-"


class MergeError(RuntimeError):
    """A merge was refused or failed; the message says why and what to do."""


# --- the folder: temp, marker, rename (the job writes; anyone reads) --------------------------


def default_out_dir(run_dir: str | os.PathLike[str]) -> Path:
    """Where a run's merge goes unless told otherwise: <run>/merged/."""
    return Path(run_dir) / files.MERGED_DIR


def is_complete(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a finished merge: its COMPLETE marker, written last, is there."""
    return (Path(path) / COMPLETE).is_file()


def merged_model(run: Run | str | os.PathLike[str]) -> Path | None:
    """The run's complete merged folder (<run>/merged/), or None when there is none yet."""
    path = default_out_dir(open_run(run).dir)
    return path if is_complete(path) else None


def merge_check(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The check the merge recorded in its folder (prompts, identical, first_difference...)."""
    return files.read_record(Path(path) / CHECK_FILE)


def temp_dir(dest: Path, tag: str) -> Path:
    """The folder a merge into `dest` is written in first: beside it (same file system, so the
    final rename is atomic), hidden, named after it."""
    return dest.parent / f"{TEMP_PREFIX}{dest.name}-{tag}"


def leftovers(dest: Path) -> list[Path]:
    """Temp and set-aside folders earlier merges into `dest` left behind (killed mid-write)."""
    if not dest.parent.is_dir():
        return []
    names = (f"{TEMP_PREFIX}{dest.name}-", f"{OLD_PREFIX}{dest.name}-")
    return [p for p in dest.parent.iterdir() if p.name.startswith(names)]


def remove_leftovers(dest: Path) -> None:
    for path in leftovers(dest):
        shutil.rmtree(path, ignore_errors=True)


def check_replaceable(dest: Path, run_dir: Path) -> None:
    """Refuse to overwrite a folder that is not a merge: an empty folder, a merge (complete or
    not, under the run) and nothing at all may be replaced, anything else is the user's."""
    if not dest.exists():
        return
    if not dest.is_dir():
        raise MergeError(f"{dest} is a file, not a folder; pass another out_dir.")
    ours = dest == default_out_dir(run_dir).resolve()
    if is_complete(dest) or ours or not any(dest.iterdir()):
        return
    raise MergeError(
        f"{dest} exists and is not a merged model folder (it has no {COMPLETE} marker); it is "
        "left as it is. Pass an out_dir that does not exist (or is empty), or delete it."
    )


def _fsync(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def finish(tmp: Path, dest: Path) -> Path:
    """Make the merge written in `tmp` the folder `dest`: every file on disk, the COMPLETE
    marker last, then renamed into place; an older `dest` is moved aside first and removed
    only after the rename, so at no moment does an incomplete folder carry the name."""
    for path in sorted(tmp.rglob("*")):
        if path.is_file():
            _fsync(path)
    marker = tmp / COMPLETE
    with open(marker, "w", encoding="utf-8") as f:
        f.write(files.now_iso() + "\n")
        f.flush()
        os.fsync(f.fileno())
    _fsync(tmp, directory=True)
    old = None
    if dest.exists():
        old = dest.parent / f"{OLD_PREFIX}{dest.name}-{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        os.rename(dest, old)
    os.rename(tmp, dest)
    _fsync(dest.parent, directory=True)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return dest


# --- the app side: refuse, start the job, wait ------------------------------------------------


def refusal(run: Run) -> str | None:
    """Why the run cannot be merged (and what to do), or None when it can."""
    state = run.status().get("state")
    if state in files.ACTIVE_STATES:
        return f"Run {run.id} is still {state}; merge it once it has succeeded (run.wait())."
    if state == "bundled":
        return (
            f"Run {run.id} is bundled to train elsewhere; bring its results back with "
            "dragon.import_results(run, zip_path), then merge it."
        )
    if state != "succeeded":
        return (
            f"Run {run.id} has not succeeded (it is {state}): its adapter is not a finished "
            "training. Resume it with dragon.resume(run), or train a new run, then merge."
        )
    adapter = files.adapter_dir(run.dir)
    if not (adapter / "adapter_config.json").is_file():
        return f"Run {run.id} succeeded but {adapter} holds no saved adapter; train it again."
    for earlier in (run.config.get("model") or {}).get("adapters") or []:
        if not (Path(earlier) / "adapter_config.json").is_file():
            return (
                f"Run {run.id} continues from the adapter {earlier}, which is gone (was the run "
                "it continued from deleted?); without it the chain cannot be merged."
            )
    return None


def merge_command(run_dir: Path, out_dir: Path, job_dir: Path) -> list[str]:
    """The merge's process: the merge entry point, run as the job in `job_dir`."""
    return [sys.executable, "-m", "dragonfarm_core.trainers.merge_run", str(run_dir),
            "--out", str(out_dir), "--job", str(job_dir)]  # fmt: skip


@dataclass(frozen=True)
class MergeJob(JobHandle):
    """A merge under way (`start_merge` returns it at once): `state`, `logs()`, `cancel()`,
    and `wait()`, the merged folder once the job has succeeded."""

    run: Run
    out_dir: Path
    job: jobs.Job

    def wait(self, timeout: float | None = None) -> Path:
        """Block until the job ends: the merged folder, or MergeError naming why it failed
        (with the log's tail); TimeoutError after `timeout` s (the job keeps going)."""
        status = wait_status(self.job, timeout)
        if status.get("state") == "succeeded" and is_complete(self.out_dir):
            return self.out_dir
        raise ended_without(
            self.job, status, MergeError, doing=f"Merging run {self.run.id}",
            cancelled=f"Merging run {self.run.id} was cancelled; {self.out_dir} is unchanged.",
            missing=f"Merging run {self.run.id} ended, but {self.out_dir} is not complete.",
        )  # fmt: skip


def start_merge(
    run: Run | str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None
) -> MergeJob:
    """Start merging the run into `out_dir` (default <run>/merged/) and return at once."""
    run = open_run(run)
    why = refusal(run)
    if why:
        raise MergeError(why)
    dest = (default_out_dir(run.dir) if out_dir is None else Path(out_dir)).expanduser()
    dest = dest.resolve()
    check_replaceable(dest, run.dir)
    job = jobs.start_on_run(
        run.dir,
        JOB_KIND,
        lambda job_dir: merge_command(run.dir, dest, job_dir),
        device=queue.queue_key(run.config),
        error=MergeError,
        out_dir=str(dest),
    )
    return MergeJob(run, dest, job)


def merge(
    run: Run | str | os.PathLike[str],
    out_dir: str | os.PathLike[str] | None = None,
    wait: bool = True,
    *,
    timeout: float = MERGE_TIMEOUT_S,
) -> Path:
    """Merge a succeeded run into a standalone model folder; returns its path.

    out_dir: where (default <run>/merged/; an earlier merge there is replaced once the new one
    is complete). Every adapter of the run's chain is folded into the base in order, and the
    result is checked against base + adapters (merge_check.json in the folder). wait=False
    returns the path at once while the job runs (<run>/jobs/merge-<time>/; the folder is
    complete once it holds its COMPLETE marker). timeout: seconds the merge may take before it
    is stopped. Raises MergeError when the run cannot be merged or the merge fails.
    """
    pending = start_merge(run, out_dir)
    if not wait:
        return pending.out_dir
    return wait_or_stop(pending, timeout, f"Merging run {pending.run.id}")
