"""The background pipeline's process: `python -m dragonfarm_core.pipelines.job RECORD`.

`pipelines.pipeline(..., background=True)` starts it through the job runner (`rundir.jobs`,
folder pipelines/<id>/) with its judges' keys on stdin, as `batches/jobs.py` hands them over: kept
in memory only, and scrubbed from its output. It makes the steps again from the record and
runs them from the first unfinished one with `pipeline_runner.run_steps`, inside
`jobs.run_job` (status, heartbeat). Kept apart from `pipeline_runner`, which the package
imports, so the module run as __main__ is not a second copy of the runner.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from dragonfarm_core.batches.child import Scrubbed, read_keys
from dragonfarm_core.pipelines.context import Context
from dragonfarm_core.pipelines.runner import first_unfinished, run_steps, steps_of
from dragonfarm_core.rundir import jobs, location
from dragonfarm_core.rundir import pipeline_record as record_io


def _ignore_interrupt(signum: int, frame: Any) -> None:
    """The job runner turns a cancel request into SIGINT; a pipeline stops between steps
    instead (it reads the request itself), so a judge or a merge under way is not cut."""


def command(path: Path) -> list[str]:
    """The job's argv for the record at `path`."""
    return [sys.executable, "-m", "dragonfarm_core.pipelines.job", str(path)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dragonfarm_core.pipelines.job",
                                     description="Run a pipeline from its record.")  # fmt: skip
    parser.add_argument("record", type=Path)
    path = parser.parse_args(argv).record.resolve()
    keys = read_keys()
    sys.stdout = Scrubbed(sys.stdout, list(keys.values()))
    sys.stderr = Scrubbed(sys.stderr, list(keys.values()))

    def work() -> None:
        signal.signal(signal.SIGINT, _ignore_interrupt)
        record = record_io.read(path)
        runs_dir = path.parent.parent
        location.set_runs_dir(runs_dir)
        # Its stdout is the log already: a line each, not two.
        ctx = Context(path, runs_dir, record["name"], record["model"], echo=lambda _: None)
        start = first_unfinished(record)
        final = run_steps(ctx, steps_of(record, keys, start), start)
        if final["status"] == "cancelled":
            raise KeyboardInterrupt  # the job ends cancelled (run_job: a cancel was asked)

    return jobs.run_job(record_io.folder(path), work)


if __name__ == "__main__":
    sys.exit(main())
