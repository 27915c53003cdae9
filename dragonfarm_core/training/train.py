"""Start and steer training runs: `train()`, `resume()`, and status/progress/logs/wait/cancel.

    run = dragon.train(ds, "dragonfarm/tiny-support", args=dragon.TrainArgs(epochs=1))
    run.wait()                                   # or come back later: dragon.open_run(run.dir)
    dpo_ready = dragon.train(more, model=run)    # continue from a finished run

train() writes the run directory, spawns the trainer and returns at once (unless wait=True);
the run lives on if this Python session ends. `start(spec)` is the same path for every method:
train(), prefer() and reinforce() build a `RunSpec` and call it, as the Train tab does.
"""

from __future__ import annotations

import os
from typing import Any

import pandas as pd

from dragonfarm_core.rundir import create, files, launch, queue
from dragonfarm_core.rundir.run import Run, open_run
from dragonfarm_core.settings import Hardware, Lora, TrainArgs
from dragonfarm_core.spec import DEFAULT_HARDWARE, RunSpec


def start(
    spec: RunSpec,
    run_dir: str | os.PathLike[str] | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
    wait: bool = False,
) -> Run:
    """Write the run `spec` describes, launch its trainer, and return it (finished, if `wait`).

    The one way every run starts: train(), prefer(), reinforce(), the Train tab and the
    command line all build a RunSpec and call this. `run_dir` is the run's folder (new or
    empty), else a fresh id under `runs_dir` (default: the configured runs directory).
    """
    if not isinstance(spec, RunSpec):
        raise TypeError(f"spec must be a dragon.RunSpec(...), got {type(spec).__name__}.")
    queue.max_concurrent()  # a bad DRAGONFARM_MAX_CONCURRENT is reported here, not in a log
    path = create.write_run(spec, run_dir, runs_dir)
    launch.start_run(path)
    run = Run(path)
    return run.wait() if wait else run


def train(
    dataset: Any,
    model: Any,
    lora: Lora | None = None,
    args: TrainArgs | None = None,
    hardware: Hardware = DEFAULT_HARDWARE,
    name: str | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
    n_samples: int = RunSpec.n_samples,
    revision: str | None = None,
    trust_remote_code: bool = False,
    wait: bool = False,
) -> Run:
    """Fine-tune `model` with LoRA on `dataset` (mapped with .map() or conversations()).

    `model` is a preset or Hub id, a local folder, or a succeeded Run to continue from (its
    adapters are folded into the base before a new one is trained). Returns the Run at once;
    with wait=True, blocks with a progress bar and raises RunFailedError if it fails.
    """
    spec = RunSpec("sft", dataset, model, lora=lora, args=args, hardware=hardware, name=name,
                   n_samples=n_samples, revision=revision,
                   trust_remote_code=trust_remote_code)  # fmt: skip
    return start(spec, run_dir, runs_dir, wait)


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
    # The same configuration: a config.json the spec cannot read back (edited, or from another
    # version) is refused here, before its progress is touched, not in the trainer's log.
    RunSpec.from_dict(run.config, run_dir=run.dir)
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
