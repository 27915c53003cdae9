"""Where runs live: the `runs_dir=` argument, else `set_runs_dir()` / `DRAGONFARM_RUNS_DIR`,
else a `dragonfarm_runs` folder under this Python session's temp dir.

The temp default follows the manual: a fresh session never writes to the working directory or
the home folder on its own. That folder is removed when the session exits, but only when no run
in it is still queued or running (a run outlives the session that started it, and deleting its
folder under it would destroy it). The first run written there says once that it will vanish.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

from dragonfarm_core.rundir import files

ENV_VAR = "DRAGONFARM_RUNS_DIR"
SESSION_PREFIX = "dragonfarm-session-"

_configured: Path | None = None
_session_dir: Path | None = None
_announced = False


def set_runs_dir(path: str | os.PathLike[str] | None) -> Path | None:
    """Use `path` for runs from now on in this session (None: back to the default).

    Returns the previous setting, so a caller can restore it.
    """
    global _configured
    previous = _configured
    _configured = None if path is None else Path(path).expanduser().resolve()
    return previous


def configured_runs_dir() -> Path | None:
    """The runs directory set by set_runs_dir() or DRAGONFARM_RUNS_DIR, if any."""
    if _configured is not None:
        return _configured
    env = os.environ.get(ENV_VAR, "").strip()
    return Path(env).expanduser().resolve() if env else None


def runs_dir(runs_dir: str | os.PathLike[str] | None = None) -> Path:
    """The runs directory to use: the argument, the session setting, the env var, a temp dir."""
    if runs_dir is not None and str(runs_dir).strip():
        return Path(runs_dir).expanduser().resolve()
    return configured_runs_dir() or session_runs_dir()


def check_folder(path: Path, what: str = "runs dir") -> Path:
    """`path`, after checking it is a folder or can be made one (no file in its way).

    Without this, making a run's folder fails with a bare "[Errno 17] File exists" or
    "[Errno 20] Not a directory" that does not say which setting to change.
    """
    for place in (path, *path.parents):
        if not place.exists():
            continue
        if place.is_dir():
            return path
        where = "is a file" if place == path else f"is inside {place}, which is a file"
        fix = (
            f"choose another with runs_dir= or {ENV_VAR} (or dragon.set_runs_dir())"
            if what == "runs dir"
            else f"choose another {what}="
        )
        raise NotADirectoryError(f"{what} {path} {where}, not a folder; {fix}.")
    return path


def session_runs_dir() -> Path:
    """This session's temporary runs folder, created on first use."""
    global _session_dir
    if _session_dir is None:
        root = Path(tempfile.mkdtemp(prefix=SESSION_PREFIX))
        _session_dir = (root / "dragonfarm_runs").resolve()
        _session_dir.mkdir()
        atexit.register(_remove_session_dir)
    return _session_dir


def is_session_dir(path: str | os.PathLike[str]) -> bool:
    return _session_dir is not None and Path(path).resolve() == _session_dir


def looks_temporary(path: str | os.PathLike[str]) -> bool:
    """True for any session's temp runs folder, this session's or an earlier one's."""
    path = Path(path)
    return path.name == "dragonfarm_runs" and path.parent.name.startswith(SESSION_PREFIX)


def announce_run(runs_dir: str | os.PathLike[str]) -> None:
    """Say once per session that runs in the temp default vanish when the session ends."""
    global _announced
    if _announced or not is_session_dir(runs_dir):
        return
    _announced = True
    warnings.warn(
        f"Runs are being written to {runs_dir}, a temporary folder that is removed when this "
        "Python session ends. To keep runs, call dragon.set_runs_dir('~/dragonfarm_runs') or set "
        f"{ENV_VAR} before training, or pass runs_dir=.",
        UserWarning,
        stacklevel=3,
    )


def _active_runs(root: Path) -> list[Path]:
    """Runs under `root` whose trainer process is still queued or running."""
    from dragonfarm_core.rundir.launch import live_status  # the launcher imports this module

    active = []
    for child in sorted(root.iterdir()) if root.is_dir() else []:
        if files.is_run_dir(child) and live_status(child).get("state") in files.ACTIVE_STATES:
            active.append(child)
    return active


def _remove_session_dir() -> None:
    if _session_dir is None or not _session_dir.exists():
        return
    active = _active_runs(_session_dir)
    if active:
        print(
            f"dragonfarm: keeping {_session_dir}: {len(active)} run(s) in it are still queued or "
            "running. Delete the folder yourself once they finish.",
            file=sys.stderr,
        )
        return
    shutil.rmtree(_session_dir.parent, ignore_errors=True)
