"""The change counters behind the Monitor and Runs timers: writes count, reads never do."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dragonfarm_core.rundir import files
from ui import watch

# Moving a watched folder makes watchdog warn that it re-registers the watch (see ui/watch.py).
pytestmark = pytest.mark.filterwarnings("ignore:Callback with id:RuntimeWarning")


def settles(version: Callable[[], int], quiet_s: float = 0.3, timeout: float = 5) -> int:
    """The counter once no event has arrived for `quiet_s` (events come from another thread)."""
    end = time.monotonic() + timeout
    last, since = version(), time.monotonic()
    while time.monotonic() < end:
        time.sleep(0.05)
        now = version()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return now
    raise AssertionError("the counter kept changing")


def bumped(version: Callable[[], int], before: int, timeout: float = 5) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if version() != before:
            return True
        time.sleep(0.02)
    return False


def test_paths_map_to_their_run_and_to_the_table(tmp_path: Path):
    root = tmp_path
    assert watch.changed_keys(root, str(root / "r1" / files.STATUS)) == (root / "r1", True)
    assert watch.changed_keys(root, str(root / "r1" / files.PROGRESS)) == (root / "r1", False)
    assert watch.changed_keys(root, str(root / "r1" / files.LOG)) == (root / "r1", False)
    job = root / "r1" / files.JOBS_DIR / "evaluate-20260101-000000"
    assert watch.changed_keys(root, str(job / files.STATUS)) == (root / "r1", False)  # not a row
    archived = root / files.ARCHIVED_DIR / "r2"
    assert watch.changed_keys(root, str(archived / files.CONFIG)) == (archived, True)
    assert watch.changed_keys(root, str(root / files.UPLOADS_DIR / "a.csv")) == (None, False)
    assert watch.changed_keys(root, str(root / ".locks" / "queue.lock")) == (None, False)
    assert watch.changed_keys(root, str(tmp_path.parent / "elsewhere")) == (None, False)


@pytest.mark.slow
def test_writes_bump_the_run_and_table_counters_and_reads_do_not(tmp_path: Path):
    runs = tmp_path / "runs"
    run = runs / "20260101-000000-demo"
    run_version = lambda: watch.run_version(run)  # noqa: E731
    table_version = lambda: watch.runs_version(runs)  # noqa: E731
    start_run, start_table = run_version(), table_version()  # starts the watch

    run.mkdir(parents=True)
    files.write_config(run, {"id": run.name})
    assert bumped(run_version, start_run) and bumped(table_version, start_table)

    table = settles(table_version)
    before = settles(run_version)
    files.append_progress(run, {"step": 1, "loss": 2.0})
    assert bumped(run_version, before)
    assert settles(table_version) == table  # a logged step leaves the runs table alone

    seen = settles(run_version)
    files.read_progress(run), files.read_config(run), files.read_log_tail(run)
    time.sleep(0.3)
    assert run_version() == seen  # reading (as the pages do) is not a change

    files.update_status(run, state="running")
    assert bumped(table_version, table)


def test_an_archived_run_has_its_own_counter(tmp_path: Path):
    runs = tmp_path / "runs"
    run = runs / "r1"
    run.mkdir(parents=True)
    files.write_config(run, {"id": "r1"})
    moved = runs / files.ARCHIVED_DIR / "r1"
    before = watch.run_version(moved)
    (runs / files.ARCHIVED_DIR).mkdir()
    run.rename(moved)
    assert bumped(lambda: watch.run_version(moved), before)
    later = settles(lambda: watch.run_version(moved))
    files.update_status(moved, state="succeeded")
    assert bumped(lambda: watch.run_version(moved), later)


def test_an_unwatchable_folder_changes_on_every_call(tmp_path: Path, monkeypatch):
    monkeypatch.setitem(watch._watched, tmp_path.resolve(), False)
    assert watch.runs_version(tmp_path) != watch.runs_version(tmp_path)
    assert watch.run_version(tmp_path / "r") != watch.run_version(tmp_path / "r")
