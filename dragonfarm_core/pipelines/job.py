"""The background pipeline's process: `python -m dragonfarm_core.pipelines.job RECORD`.

`pipelines.pipeline(..., background=True)` starts it through the job runner (`rundir.jobs`,
folder pipelines/<id>/) with its judges' keys on stdin, as `batches/jobs.py` hands them over: kept
in memory only, and scrubbed from its output. It makes the steps again from the record and
runs them from the first unfinished one with `pipeline_runner.run_steps`, inside
`jobs.run_job` (status, heartbeat). Kept apart from `pipeline_runner`, which the package
imports, so the module run as __main__ is not a second copy of the runner.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dragonfarm_core.batches.child import run_record_job
from dragonfarm_core.pipelines.context import Context
from dragonfarm_core.pipelines.runner import first_unfinished, run_steps, steps_of
from dragonfarm_core.rundir import location
from dragonfarm_core.rundir import pipeline_record as record_io

MODULE = "dragonfarm_core.pipelines.job"


def command(path: Path) -> list[str]:
    """The job's argv for the record at `path`."""
    return [sys.executable, "-m", MODULE, str(path)]


def work(path: Path, keys: dict[str, str]) -> None:
    """Run the pipeline at `path` from its first unfinished step."""
    record = record_io.read(path)
    runs_dir = path.parent.parent
    location.set_runs_dir(runs_dir)
    # Its stdout is the log already: a line each, not two.
    ctx = Context(path, runs_dir, record["name"], record["model"], echo=lambda _: None)
    start = first_unfinished(record)
    final = run_steps(ctx, steps_of(record, keys, start), start)
    if final["status"] == "cancelled":
        raise KeyboardInterrupt  # the job ends cancelled (run_job: a cancel was asked)


def main(argv: list[str] | None = None) -> int:
    return run_record_job(argv, MODULE, "pipeline", record_io.folder, work)


if __name__ == "__main__":
    sys.exit(main())
