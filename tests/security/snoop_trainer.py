"""A stand-in trainer that looks for secrets where a reward command could find them.

Selected with DRAGONFARM_TRAINER_MODULE=snoop_trainer. `main(run_dir)` reads snoop.json from the
run folder ({"snoop": path of proc_snoop.py, "needles": [secret values]}), records whether its
own environment (os.environ and /proc/self/environ) holds a needle, scores one completion with a
command reward that runs proc_snoop.py, and writes trainer-report.json and snoop-report.json.
"""

import json
import os
import sys
from pathlib import Path

from dragonfarm_core.rewards import RewardErrors, reward, score
from dragonfarm_core.rundir import files


def main(run_dir: str) -> None:
    run = Path(run_dir)
    spec = json.loads((run / "snoop.json").read_text())
    needles = spec["needles"]
    with open("/proc/self/environ", "rb") as f:
        initial = f.read()
    command = [sys.executable, spec["snoop"], str(run / "snoop-report.json"), *needles]
    errors = RewardErrors()
    scores = score([reward("command", command=command, timeout=60)], ["p"], ["c"], errors=errors)
    files.write_json(
        run / "trainer-report.json",
        {
            "pid": os.getpid(),
            "environ_hits": [n for n in needles if n in os.environ.values()],
            "proc_environ_hits": [n for n in needles if n.encode() in initial],
            "environ_names": sorted(os.environ),
            "reward": scores.total,
            "reward_errors": errors.counts(),
        },
    )
    files.update_status(run, state="succeeded", finished_at=files.now_iso())
