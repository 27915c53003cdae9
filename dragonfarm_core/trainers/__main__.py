"""Train one run in this process.

    python -m dragonfarm_core.trainers RUN_DIR

`dragonfarm_core.rundir.launch.start_run` spawns this, with the allow-listed `launch.child_env()`
(no token: the app downloaded the model, and the config names its folder). On Linux it first
runs itself again, same pid, with tcmalloc or jemalloc preloaded where the system has one
(`allocator.reexec_with_fast_allocator`: a third less peak memory training on a CPU). It waits its
turn in the machine's device queue (pure Python, nothing heavy imported while it waits), then
imports the trainer for the run's method (its `trainer` in `methods.METHODS`) and calls its
`main(run_dir)`; as it ends it leaves the queue. Tests replace that module with
`DRAGONFARM_TRAINER_MODULE`. Whatever escapes the trainer, the run ends marked failed with the
log's tail: no run stays "running" after its process has ended.

A run on several devices (`Hardware(devices=...)`): once the queue gave it its turn, this
process starts `accelerate launch` (`launch.accelerate_command`), which runs this module again
in each of the run's processes, and waits for it; it keeps the run's pid and queue ticket. In
those processes (RANK set) the queue is skipped and the trainer runs; its rank 0 writes.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import sys
import traceback
from pathlib import Path

from dragonfarm_core.methods import method
from dragonfarm_core.rundir import allocator, disk, files, launch, queue, threads
from dragonfarm_core.trainers import torch_threads
from dragonfarm_core.trainers.log_noise import quiet_library_noise

TRAINER_MODULE_ENV = "DRAGONFARM_TRAINER_MODULE"


def trainer_module(config: dict) -> str:
    """The module that trains a run of the config's method: its row of the method table."""
    return os.environ.get(TRAINER_MODULE_ENV) or method(config.get("method", "sft")).trainer


def _fail(run_dir: Path, exc: BaseException) -> None:
    """Last resort: mark the run failed, unless the trainer already recorded how it ended."""
    if files.read_status(run_dir).get("state") in files.TERMINAL_STATES:
        return
    error = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    files.update_status(
        run_dir,
        state="failed",
        reason=disk.DISK_FULL if disk.is_disk_full(exc) else "error",
        error=error[:500],
        log_tail=files.read_log_tail(run_dir, 50),
        finished_at=files.now_iso(),
    )


def _settle(run_dir: Path) -> None:
    """The trainer returned: make sure the run's state is final."""
    if files.read_status(run_dir).get("state") not in files.ACTIVE_STATES:
        return
    if files.cancel_requested(run_dir):
        files.update_status(run_dir, state="cancelled", finished_at=files.now_iso())
        return
    files.update_status(
        run_dir,
        state="failed",
        reason="error",
        error="The trainer returned without writing a final state.",
        log_tail=files.read_log_tail(run_dir, 50),
        finished_at=files.now_iso(),
    )


def main(argv: list[str] | None = None) -> int:
    command = argv is None
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not files.is_run_dir(argv[0]):
        print(
            "usage: python -m dragonfarm_core.trainers RUN_DIR  (a folder with config.json)",
            file=sys.stderr,
        )
        return 2
    run_dir = Path(argv[0]).resolve()
    if command:  # started as `python -m dragonfarm_core.trainers` (not called from other code)
        allocator.reexec_with_fast_allocator()  # tcmalloc or jemalloc, where the machine has one
    quiet_library_noise()  # train.log is what the Monitor shows: no library internals in it
    if "RANK" in os.environ:  # one of the processes `accelerate launch` started
        return _train_rank(run_dir)
    try:
        return _train(run_dir)
    finally:
        with contextlib.suppress(OSError):
            queue.leave()  # the device is free: the next run in the machine's queue may start


def _train(run_dir: Path) -> int:
    try:
        if not queue.wait_turn(run_dir):
            return 0
        ranks = launch.accelerate_command(run_dir, files.read_config(run_dir))
        if ranks is not None:
            return _launch_ranks(run_dir, ranks)
        threads.before_torch()  # OpenMP reads its wait policy when torch loads it
        module = importlib.import_module(trainer_module(files.read_config(run_dir)))
        if "torch" in sys.modules:  # a stand-in trainer (tests) may not use torch
            print(f"{torch_threads.apply()}; malloc: {allocator.allocator_in_use()}", flush=True)
        module.main(str(run_dir))
    except SystemExit as exc:
        if exc.code not in (0, None):
            _fail(run_dir, exc)
            return 1
    except BaseException as exc:
        traceback.print_exc()  # into train.log, so the tail shows it
        sys.stderr.flush()
        _fail(run_dir, exc)
        return 1
    _settle(run_dir)
    return 0


def _launch_ranks(run_dir: Path, command: list[str]) -> int:
    """Run the processes of a multi-device run and wait for them; their output goes to this
    process's (train.log)."""
    print(f"[dragonfarm] starting: {' '.join(command)}", flush=True)
    code = subprocess.call(command)
    if code != 0:
        _fail(run_dir, RuntimeError(f"accelerate launch exited with status {code}."))
        return 1
    _settle(run_dir)
    return 0


def _train_rank(run_dir: Path) -> int:
    """One process of a multi-device run: the trainer, without the queue (the launcher holds
    the run's turn). A failure propagates: rank 0 records it, the launcher sees the exit."""
    threads.before_torch()
    module = importlib.import_module(trainer_module(files.read_config(run_dir)))
    line = torch_threads.apply()  # accelerate sets OMP_NUM_THREADS per process (1 unless given)
    line += f"; malloc: {allocator.allocator_in_use()}"
    if os.environ["RANK"] == "0":
        print(line, flush=True)
    module.main(str(run_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
