"""A training run as a job (`jobs`): start its trainer, tell whether it is alive, cancel it.

The run directory is the job's folder and train.log its log, so a run's files are what they
always were. `start_run` spawns the trainer, by default `python -m dragonfarm_core.trainers
RUN_DIR` (`trainer_command`), queued for the device the run's config resolves to; it refuses a
run that is active or that has a job of its own in progress (an evaluation reads its adapter).
A run on several devices is started from there by `accelerate launch` (`accelerate_command`).
Liveness and cancel are the runner's, worded for a run (what to do: dragon.resume(run)).
`child_env` and `hide_environ` are re-exported from `childenv` for the modules that start
their own children (the inference worker, the reward helper). Pure standard library plus
psutil: the app imports this.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dragonfarm_core.rundir import files, jobs, queue
from dragonfarm_core.rundir.childenv import PASS_ENV_VAR as PASS_ENV_VAR
from dragonfarm_core.rundir.childenv import child_env as child_env
from dragonfarm_core.rundir.childenv import hide_environ as hide_environ
from dragonfarm_core.rundir.jobs import process_alive as process_alive

RUN = jobs.Wording(
    process="trainer",
    noun="run",
    after_gone="resume it with dragon.resume(run)",
    never_started="Start it again with dragon.resume(run).",
)


def trainer_command(run_dir: str | os.PathLike[str]) -> list[str]:
    """The trainer entry point: waits its device turn, then trains the run's method."""
    return [sys.executable, "-m", "dragonfarm_core.trainers", str(run_dir)]


def accelerate_command(run_dir: str | os.PathLike[str], config: dict[str, Any]) -> list[str] | None:
    """How the trainer starts a run of several processes, once the queue gave it its turn:
    `accelerate launch` running `python -m dragonfarm_core.trainers RUN_DIR` in each (as a
    rank, it skips the queue). None for a run on one device.

    Without an accelerate config file: plain DDP, one process per GPU (the GPUs the queue
    reserved, as the machine numbers them) or the CPU processes asked for, on a free port
    accelerate picks. With one (FSDP, DeepSpeed, several machines), the file decides.
    """
    hardware = config.get("hardware") or {}
    devices, given = hardware.get("devices"), hardware.get("accelerate_config")
    used = queue.run_devices(hardware)
    processes = devices if isinstance(devices, int) else len(used)
    if devices is None or (processes == 1 and not given):
        return None
    command = [sys.executable, "-m", "accelerate.commands.launch"]
    if given:
        command += ["--config_file", str(given)]
    else:
        command += ["--multi_gpu", "--num_processes", str(processes), "--num_machines", "1",
                    "--mixed_precision", "no", "--dynamo_backend", "no",
                    "--main_process_port", "0"]  # fmt: skip
        if used[0].startswith("cuda"):
            command += ["--gpu_ids", ",".join(d.removeprefix("cuda:") for d in used)]
        elif not os.environ.get("OMP_NUM_THREADS"):  # accelerate's default is 1 a process
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
            command += ["--num_cpu_threads_per_process", str(max(1, cores // processes))]
    return [*command, "-m", "dragonfarm_core.trainers", str(run_dir)]


def _job(run_dir: str | os.PathLike[str], name: str = "") -> jobs.Job:
    path = Path(run_dir).resolve()
    return jobs.Job(path, files.log_path(path), RUN, name)


def start_run(
    run_dir: str | os.PathLike[str],
    *,
    argv: Sequence[str | os.PathLike[str]] | None = None,
    **status_fields: Any,
) -> int:
    """Queue the run and spawn its trainer process; returns the pid. Returns at once.

    argv: the trainer's command (default `trainer_command(run_dir)`). `status_fields` go into
    the fresh queued status (resume notes its checkpoint there).
    """
    run_dir = Path(run_dir).resolve()
    config = files.read_config(run_dir)
    name = f"Run {config.get('id', run_dir.name)}"
    busy = jobs.active_jobs(run_dir)
    if busy:
        raise RuntimeError(
            f"{name} has a job in progress ({busy[0].dir.name}, {busy[0].state}); wait for "
            "it or cancel it first."
        )
    job = _job(run_dir, name)
    command = trainer_command(run_dir) if argv is None else argv
    return job.start(command, device=queue.queue_key(config), **status_fields)


def live_status(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """status.json, with a queued/running run whose process is gone reported failed.

    Worked out on each read and never written (`jobs.Job.status`): every reader (a second
    browser, a later session) agrees, and a full disk cannot stop the Monitor or runs().
    """
    return _job(run_dir).status()


def cancel_run(run_dir: str | os.PathLike[str], timeout: float = 120) -> dict[str, Any]:
    """Ask the trainer to stop after its current step; after `timeout` s, kill its group.

    A queued run's waiting process sees the request and exits as cancelled. Returns once the
    process is gone (so the run's folder can be moved or deleted), with the final status.
    """
    return _job(run_dir).cancel(timeout)
