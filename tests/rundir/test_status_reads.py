"""Reading a run's status never writes, so a full disk cannot stop the Monitor, the Runs table
or dragon.runs(); and a trainer that died on a full disk says "disk full", not "killed".

A run whose trainer is gone is reported failed (interrupted) on every read, computed from the
files, the same for every reader, and it can still be resumed.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

import dragonfarm_core as dragon
from dragonfarm_core.rundir import atomic, disk, files, store
from dragonfarm_core.rundir.create import create_run
from dragonfarm_core.rundir.run import Run, RunFailedError
from dragonfarm_core.training.train import train
from dragonfarm_core.training.triage import triage
from ui.tabs import monitor

# What a trainer prints when its save meets a full disk: a real ENOSPC, from /dev/full.
SAVE_ON_FULL_DISK = "open('/dev/full', 'wb', buffering=0).write(b'checkpoint')"


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file below `folder`: its bytes and modification time (ns)."""
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _died(run_dir: Path, code: str = "print('step 3 loss 0.4', flush=True)") -> int:
    """Leave `run_dir` as a trainer that died mid-run leaves it: status "running" with the pid
    and create time of a process that has ended, its output at the end of train.log."""
    with open(files.log_path(run_dir), "ab") as log:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=log, stderr=log)
        created = psutil.Process(proc.pid).create_time()
        proc.wait(timeout=30)
    files.update_status(run_dir, state="running", pid=proc.pid, pid_create_time=created,
                        started_at=files.now_iso(), step=3, total_steps=10)  # fmt: skip
    return proc.pid


def _fill_disk(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """From now on every whole-file write (status.json's included) fails as on a full disk;
    returns the paths tried."""
    tried: list[Path] = []

    def no_space(path, write):
        tried.append(Path(path))
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(atomic, "write_atomic", no_space)
    return tried


def test_reading_a_dead_runs_status_writes_nothing(runs_root, sft_data, model_dir, monkeypatch):
    path = create_run("sft", sft_data, str(model_dir), runs_dir=runs_root)
    pid = _died(path)
    before = _snapshot(path)
    full_disk = _fill_disk(monkeypatch)

    status = Run(path).status()
    assert status["state"] == "failed" and status["reason"] == "interrupted"
    assert (
        f"pid {pid}" in status["error"] and "resume it with dragon.resume(run)" in status["error"]
    )
    assert "step 3 loss 0.4" in status["log_tail"]
    # Every reader agrees, at every read: the same status, the same finishing time.
    assert Run(path).status() == status == dragon.status(path)
    assert dragon.runs(runs_root).iloc[0]["state"] == "failed"
    assert store.runs(runs_root).iloc[0]["duration"] >= 0
    header, *_ = monitor.show(str(path), runs_dir=runs_root)
    assert header.startswith("**failed**")
    with pytest.raises(RunFailedError, match="interrupted"):
        Run(path).wait(timeout=5)

    assert full_disk == [] and _snapshot(path) == before  # nothing written, nothing tried
    assert files.read_status(path)["state"] == "running"  # as the dead trainer left it


def test_a_dead_run_can_still_be_resumed(runs_root, sft_data, model_dir, wait_for):
    path = create_run("sft", sft_data, str(model_dir), runs_dir=runs_root)
    _died(path)
    assert Run(path).state == "failed"
    run = dragon.resume(path)
    assert run.wait(timeout=60, poll=0.05).state == "succeeded"


def test_a_trainer_that_died_on_a_full_disk_says_disk_full(runs_root, sft_data, model_dir):
    path = create_run("sft", sft_data, str(model_dir), runs_dir=runs_root)
    # Its own failed status could not be written either (a full disk): only the log tells.
    pid = _died(path, SAVE_ON_FULL_DISK)
    status = Run(path).status()
    assert status["state"] == "failed" and status["reason"] == disk.DISK_FULL
    assert "the disk was full" in status["error"] and "killed or crashed" not in status["error"]
    assert f"pid {pid}" in status["error"] and "Free space on the disk" in status["error"]
    assert any("No space left on device" in line for line in status["log_tail"])
    assert triage(path).kind == disk.DISK_FULL


def test_a_trainer_whose_save_meets_a_full_disk_reports_disk_full(
    runs_root, sft_data, model_dir, monkeypatch
):
    monkeypatch.setenv("FAKE_TRAINER_DISK_FULL_AT", "3")
    run = train(sft_data, str(model_dir), runs_dir=runs_root)
    with pytest.raises(RunFailedError, match="No space left on device") as caught:
        run.wait(timeout=60, poll=0.05)
    assert caught.value.reason == disk.DISK_FULL
    assert files.read_status(run.dir)["reason"] == disk.DISK_FULL  # the trainer wrote it
    found = triage(run)
    assert found.kind == disk.DISK_FULL and "Free space" in found.explanation
    assert [fix.action for fix in found.fixes] == ["resume"]  # its checkpoint at step 2


def test_disk_full_is_told_from_other_failures(tmp_path):
    assert disk.is_disk_full(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    wrapped = RuntimeError("could not save the checkpoint")
    wrapped.__cause__ = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert disk.is_disk_full(wrapped)
    assert not disk.is_disk_full(OSError(errno.EACCES, "Permission denied"))
    assert not disk.is_disk_full(MemoryError())
    assert disk.full_disk(tmp_path, ["OSError: [Errno 28] No space left on device"])
    assert disk.full_disk(tmp_path, ["Killed"]) is None  # this test's disk has room
