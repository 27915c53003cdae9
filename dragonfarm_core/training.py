"""Start and steer training runs: `train()`, `resume()`, and status/progress/logs/wait/cancel.

    run = dragon.train(ds, "dragonfarm/tiny-support", args=dragon.TrainArgs(epochs=1))
    run.wait()                                   # or come back later: dragon.open_run(run.dir)
    dpo_ready = dragon.train(more, model=run)    # continue from a finished run

train() writes the run directory, spawns the trainer and returns at once (unless wait=True);
the run lives on if this Python session ends. `start_training` is the same path for every
method, which prefer() and reinforce() use too.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from dragonfarm_core.rundir import create, files, launch, queue
from dragonfarm_core.rundir.run import Run, open_run
from dragonfarm_core.settings import Hardware, Lora, TrainArgs

# Settings are frozen, so one default instance is safely shared by every call.
DEFAULT_LORA, DEFAULT_ARGS, DEFAULT_HARDWARE = Lora(), TrainArgs(), Hardware()


def start_training(
    method: str,
    dataset: Any,
    model: Any,
    *,
    lora: Lora,
    args: TrainArgs,
    hardware: Hardware,
    name: str | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
    n_samples: int = 10,
    revision: str | None = None,
    trust_remote_code: bool = False,
    method_args: dict[str, Any] | None = None,
    prepare: Callable[[Path], None] | None = None,
    wait: bool = False,
) -> Run:
    """Create a run of `method`, launch it, and return it (finished, if `wait`).

    `prepare(run_dir)` runs between writing the run and launching it (reinforce() copies its
    custom reward files in); if it raises, the half-made run directory is removed.
    """
    queue.max_concurrent()  # a bad DRAGONFARM_MAX_CONCURRENT is reported here, not in a log
    path = create.create_run(
        method,
        dataset,
        model,
        lora,
        args,
        hardware,
        name,
        run_dir,
        runs_dir,
        n_samples,
        revision,
        trust_remote_code,
        method_args,
    )
    if prepare is not None:
        try:
            prepare(path)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)  # never leave half a run behind
            raise
    launch.start_run(path)
    run = Run(path)
    return run.wait() if wait else run


def train(
    dataset: Any,
    model: Any,
    lora: Lora = DEFAULT_LORA,
    args: TrainArgs = DEFAULT_ARGS,
    hardware: Hardware = DEFAULT_HARDWARE,
    name: str | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
    n_samples: int = 10,
    revision: str | None = None,
    trust_remote_code: bool = False,
    wait: bool = False,
) -> Run:
    """Fine-tune `model` with LoRA on `dataset` (mapped with .map() or conversations()).

    `model` is a preset or Hub id, a local folder, or a succeeded Run to continue from (its
    adapters are folded into the base before a new one is trained). Returns the Run at once;
    with wait=True, blocks with a progress bar and raises RunFailedError if it fails.
    """
    return start_training(
        "sft",
        dataset,
        model,
        lora=lora,
        args=args,
        hardware=hardware,
        name=name,
        run_dir=run_dir,
        runs_dir=runs_dir,
        n_samples=n_samples,
        revision=revision,
        trust_remote_code=trust_remote_code,
        wait=wait,
    )


def resume(run: Run | str | os.PathLike[str], wait: bool = False) -> Run:
    """Continue a failed or cancelled run with the same configuration.

    It picks up from its newest checkpoint; a run that has none starts over (and says so).
    """
    run = open_run(run)
    state = run.status().get("state")
    if state in files.ACTIVE_STATES:
        raise RuntimeError(
            f"Run {run.id} is {state}; it needs no resuming. Wait for it, or cancel it first."
        )
    if state == "succeeded":
        raise RuntimeError(
            f"Run {run.id} already succeeded. To train further, start a new run "
            "from it: dragon.train(dataset, model=run)."
        )
    if state == "bundled":
        raise RuntimeError(
            f"Run {run.id} is bundled to train elsewhere; bring its results back "
            "with dragon.import_results(run, zip_path)."
        )
    if state == files.DAMAGED:
        # Its pid cannot be read, so a trainer may still be running it: a second one would
        # train the same folder at the same time.
        raise RuntimeError(f"Run {run.id} cannot be resumed as it is: {run.status()['error']}")
    checkpoints = files.checkpoints(run.dir)
    if checkpoints:
        step = int(checkpoints[-1].name.removeprefix(files.CHECKPOINT_PREFIX))
        # Rows logged after the checkpoint will be logged again; keep the curve free of repeats.
        kept = [r for r in files.read_progress(run.dir) if (r.get("step") or 0) <= step]
        files.write_progress(run.dir, kept)
        print(f"Resuming run {run.id} from {checkpoints[-1].name} (step {step}).")
    else:
        files.write_progress(run.dir, [])
        print(f"Run {run.id} has no checkpoint to resume from; it starts over from step 0.")
    launch.start_run(run.dir, resumed_from=str(checkpoints[-1]) if checkpoints else None)
    return run.wait() if wait else run


def status(run: Run | str | os.PathLike[str]) -> dict[str, Any]:
    """The run's state and details (a dict with at least `state`)."""
    return open_run(run).status()


def progress(run: Run | str | os.PathLike[str]) -> pd.DataFrame:
    """One row per logged step: step, epoch, loss, eval_loss, lr, grad_norm, elapsed_s, eta_s."""
    return open_run(run).progress()


def logs(run: Run | str | os.PathLike[str], n: int = 50) -> list[str]:
    """The last `n` lines of the trainer's log."""
    return open_run(run).logs(n)


def wait(run: Run | str | os.PathLike[str], timeout: float | None = None, poll: float = 2) -> Run:
    """Block with a progress bar until the run ends; raises RunFailedError unless it succeeded."""
    return open_run(run).wait(timeout=timeout, poll=poll)


def cancel(run: Run | str | os.PathLike[str], timeout: float = 120) -> Run:
    """Stop the run after its current step (checkpoint kept); kill it after `timeout` s."""
    return open_run(run).cancel(timeout=timeout)
