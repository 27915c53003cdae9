"""A trainer that ends is reaped at once: no zombie child of the app until the next launch."""

from __future__ import annotations

import psutil

from dragonfarm_core.rundir import files
from dragonfarm_core.training.train import train


def test_a_finished_trainer_leaves_no_zombie_without_another_launch(
    runs_root, sft_data, model_dir, wait_for
):
    run = train(sft_data, str(model_dir), runs_dir=runs_root)
    pid = run.status()["pid"]
    # Read status.json directly: nothing here polls the process (no launch.process_alive).
    wait_for(lambda: files.read_status(run.dir).get("state") == "succeeded", what="the run")
    # A zombie's pid still exists: only a reaped child's is gone.
    wait_for(lambda: not psutil.pid_exists(pid), timeout=10, what=f"trainer {pid} reaped")
    assert pid not in [child.pid for child in psutil.Process().children()]
