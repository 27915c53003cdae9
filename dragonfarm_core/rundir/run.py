"""`Run`: a run directory as an object. Everything is read from the files on each call, so a
Run opened in a later session, or in a second browser, sees exactly what the trainer wrote.

    run = dragon.open_run("dragonfarm_runs/20260914-101500-tiny-support")
    run.status()["state"]; run.progress(); run.logs(20); run.wait(); run.cancel()
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import pandas as pd

from dragonfarm_core.methods import PROGRESS_COLUMNS
from dragonfarm_core.rundir import files, launch, location, refs


class RunFailedError(RuntimeError):
    """A run ended failed or cancelled while it was waited on; carries the reason and log tail."""

    def __init__(
        self,
        message: str,
        *,
        run_id: str,
        state: str | None,
        reason: str | None,
        log_tail: list[str],
    ) -> None:
        super().__init__(message)
        self.run_id, self.state, self.reason, self.log_tail = run_id, state, reason, log_tail


class Run:
    """One run directory: config, status, progress, logs; wait for it or cancel it."""

    def __init__(self, dir: str | os.PathLike[str]) -> None:
        path = Path(dir).expanduser().resolve()
        if not files.is_run_dir(path):
            raise FileNotFoundError(
                f"{path} is not a run directory: it has no {files.CONFIG}. "
                "dragon.runs() lists the runs in the runs directory."
            )
        self.dir = path
        # Read once: config.json never changes after the run is created. A damaged one still
        # opens the run (to look at it, delete it): status() says "damaged", config raises.
        self._config: dict[str, Any] = {}
        self._damage: files.ConfigDamagedError | None = None
        try:
            self._config = files.read_config(path)
        except files.ConfigDamagedError as e:
            self._damage = e

    @property
    def config(self) -> dict[str, Any]:
        """config.json; ConfigDamagedError, saying what is wrong, when it cannot be read."""
        if self._damage is not None:
            raise files.ConfigDamagedError(str(self._damage))
        return self._config

    @property
    def id(self) -> str:
        return str(self._config.get("id") or self.dir.name)

    @property
    def name(self) -> str:
        return str(self._config.get("name") or self.id)

    @property
    def method(self) -> str:
        return str(self._config.get("method", "sft"))

    @property
    def state(self) -> str | None:
        return self.status().get("state")

    def status(self) -> dict[str, Any]:
        """status.json; a queued/running run whose process is gone is reported failed (never
        written: reads do not write), a status.json that cannot be read is reported "damaged"
        (files.read_status), and so is a run whose config.json cannot be read (files.read_config).
        """
        if self._damage is not None:
            return files.damaged_config_status(self._damage)
        return launch.live_status(self.dir)

    def progress(self) -> pd.DataFrame:
        """One row per logged step: the standard columns, then any the method adds."""
        frame = pd.DataFrame(files.read_progress(self.dir))
        for column in PROGRESS_COLUMNS:
            # errors="coerce": a value of the wrong type (a hand-edited file) shows as missing.
            frame[column] = (
                pd.to_numeric(frame[column], errors="coerce")
                if column in frame
                else pd.Series(dtype="float64")
            )
        extra = [c for c in frame.columns if c not in PROGRESS_COLUMNS]
        return frame[[*PROGRESS_COLUMNS, *extra]]

    def logs(self, n: int = 50) -> list[str]:
        """The last `n` lines of the trainer's log."""
        return files.read_log_tail(self.dir, n)

    def wait(self, timeout: float | None = None, poll: float = 2) -> Run:
        """Block, with a progress bar, until the run ends. Raises RunFailedError unless it
        succeeded, TimeoutError after `timeout` seconds (the run keeps going)."""
        from tqdm.auto import tqdm

        deadline = None if timeout is None or math.isinf(timeout) else time.monotonic() + timeout
        status, checks = self.status(), 0
        with tqdm(total=status.get("total_steps"), desc=self.id, unit="step") as bar:
            while status.get("state") in files.ACTIVE_STATES:
                _show(bar, status)
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"Run {self.id} is still {status.get('state')} after {timeout:g} s; it "
                        "keeps going. Wait again, or cancel it with run.cancel()."
                    )
                # Look again soon at first (short runs, a run that fails at once), then every
                # `poll` seconds.
                delay = min(poll, 0.1 * 2**checks)
                checks = min(checks + 1, 10)
                if deadline is not None:
                    delay = min(delay, deadline - time.monotonic())
                time.sleep(max(0.0, delay))
                status = self.status()
            _show(bar, status)
        return self._finished(status)

    def _finished(self, status: dict[str, Any]) -> Run:
        state = status.get("state")
        if state == "succeeded":
            return self
        tail = status.get("log_tail") or files.read_log_tail(self.dir, 20)
        if state == "failed":
            message = (
                f"Run {self.id} failed ({status.get('reason') or 'error'}): "
                f"{status.get('error') or 'see the log'}"
            )
        elif state == "cancelled":
            message = f"Run {self.id} was cancelled. Resume it with dragon.resume(run)."
        elif state == files.DAMAGED:
            message = f"Run {self.id}: {status.get('error')}"
        elif state == "bundled":
            message = (
                f"Run {self.id} is bundled to train on another machine; bring its "
                "results back with dragon.import_results(run, zip_path)."
            )
        else:
            message = f"Run {self.id} has no known state ({state!r}) in {files.STATUS}."
        if tail:
            message += "\nLast lines of the log:\n" + "\n".join(tail)
        raise RunFailedError(
            message, run_id=self.id, state=state, reason=status.get("reason"), log_tail=list(tail)
        )

    def cancel(self, timeout: float = 120) -> Run:
        """Ask the trainer to stop after its current step (keeping a checkpoint); after
        `timeout` seconds its processes are killed. A queued run leaves the queue."""
        launch.cancel_run(self.dir, timeout=timeout)
        return self

    def __repr__(self) -> str:
        status = self.status()
        parts = [f"Run {self.id!r}", self.method, str(status.get("state"))]
        if status.get("total_steps"):
            parts.append(f"step {status.get('step') or 0}/{status['total_steps']}")
        return f"<{' '.join(parts)} at {self.dir}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Run) and other.dir == self.dir

    def __hash__(self) -> int:
        return hash(self.dir)

    def __fspath__(self) -> str:
        return str(self.dir)


def _show(bar: Any, status: dict[str, Any]) -> None:
    total = status.get("total_steps")
    if total and bar.total != total:
        bar.total = total
    step = status.get("step") or 0
    if step > bar.n:
        bar.update(step - bar.n)
    bar.set_postfix_str(str(status.get("state")), refresh=True)


def open_run(
    dir: Run | str | os.PathLike[str], runs_dir: str | os.PathLike[str] | None = None
) -> Run:
    """A run by its directory, or by its id within the runs directory.

    With `runs_dir` given, the run must be in it (or its archived/): a reference that resolves
    elsewhere, `..` and symlinks included, is refused (refs.OutsideFolderError). Without it,
    any run folder's path opens, as the manual's dragon_run(dir) does."""
    if runs_dir is not None and str(runs_dir).strip():
        found = refs.resolve_run(dir, runs_dir, archived=True)
        return dir if isinstance(dir, Run) and dir.dir == found else Run(found)
    if isinstance(dir, Run):
        return dir
    path = Path(dir).expanduser()
    if files.is_run_dir(path):
        return Run(path)
    if path.name == str(dir):  # a bare id
        candidate = location.runs_dir(runs_dir) / path.name
        if files.is_run_dir(candidate):
            return Run(candidate)
        raise FileNotFoundError(
            f"No run {dir!r} in {candidate.parent}, and no such directory "
            "here. dragon.runs() lists the runs."
        )
    return Run(path)  # raises, naming the folder
