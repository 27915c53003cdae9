"""The llama.cpp build as a background job: what the Export tab's Build button starts.

    pending = start_build()      # or the build already under way, wherever it was started
    pending.state, pending.progress(), pending.logs(20), pending.cancel()
    pending.wait()               # the built folder, or LlamaCppBuildError with the log's tail

The job is an ordinary job of the job runner (`rundir.jobs`), in <cache root>/jobs/llamacpp-<time>/
beside the cache it fills: one build per machine, whichever app, browser or session started it,
so a second start returns the build under way. Its process is
`python -m dragonfarm_core.llamacpp.job --job JOB` running `llama_cpp_build.build_llama_cpp`
(a complete build is reused in seconds); its log is the build's output: pip's, cmake's, the
compiler's. Jobs get an allow-listed environment without pip's settings, and an index URL may
carry a password: the PIP_* variables of the starting process reach the job on its stdin, for
the pip it runs, and nowhere else. Once the job has succeeded, `find_llama_cpp()` finds the
build: GGUF export works without a restart. Pure standard library.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from dragonfarm_core.llamacpp import location as llama_cpp
from dragonfarm_core.llamacpp.build import LlamaCppBuildError, build_llama_cpp
from dragonfarm_core.rundir import files, jobs
from dragonfarm_core.rundir.job_handle import JobHandle, ended_without, wait_status

JOB_KIND = "llamacpp"
# The compile steps in the log: ninja's "[40/216] Building CXX ...", make's "[ 40%] Building ...".
NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\] ")
MAKE_STEP = re.compile(r"^\[\s*(\d+)%\] ")
PIP_PREFIX = "PIP_"


def jobs_home() -> Path:
    """Where build jobs live: the cache root (their jobs/ folder), beside the build itself."""
    return llama_cpp.cache_root()


@dataclass(frozen=True)
class BuildJob(JobHandle):
    """A llama.cpp build under way: `state`, `logs()`, `cancel()`, `progress()` and `wait()`,
    the built folder once the job has succeeded."""

    job: jobs.Job

    def progress(self) -> tuple[int, int] | None:
        """(steps compiled, steps in all) from the log's newest compile line; None before
        compiling starts (the download and unpacking) or without one."""
        for line in reversed(self.job.logs(200)):
            if found := NINJA_STEP.match(line):
                return int(found[1]), int(found[2])
            if found := MAKE_STEP.match(line):
                return int(found[1]), 100
        return None

    def wait(self, timeout: float | None = None) -> Path:
        """Block until the job ends: the built folder, or LlamaCppBuildError naming why it did
        not build (with the log's tail); TimeoutError after `timeout` s (it keeps going)."""
        status = wait_status(self.job, timeout)
        dest = llama_cpp.cache_dir()
        if status.get("state") == "succeeded" and llama_cpp.cache_problem(dest) is None:
            return dest
        raise ended_without(
            self.job, status, LlamaCppBuildError, doing="Building llama.cpp",
            cancelled="Building llama.cpp was cancelled; build again to resume it.",
            missing=f"Building llama.cpp ended, but {dest} holds no usable build.",
        )  # fmt: skip


def active_build() -> BuildJob | None:
    """The build job under way on this machine, or None."""
    busy = jobs.active_jobs(jobs_home(), JOB_KIND)
    return BuildJob(busy[-1]) if busy else None


def start_build(*, jobs_n: int = 2, portable: bool = False) -> BuildJob:
    """Start building llama.cpp into the cache as a job, and return at once; the build under
    way instead, when there is one. jobs_n: parallel compile jobs; portable: no -march=native."""
    running = active_build()
    if running is not None:
        return running
    home = jobs_home()
    home.mkdir(parents=True, exist_ok=True)
    jobs.prune(home, JOB_KIND, keep=jobs.KEEP_JOBS - 1)
    job = jobs.open_job(files.new_job_dir(home, JOB_KIND))
    argv = [sys.executable, "-m", __name__, "--job", str(job.dir), "--jobs", str(jobs_n)]
    pip = {k: v for k, v in os.environ.items() if k.startswith(PIP_PREFIX)}
    job.start([*argv, *(["--portable"] if portable else [])], device=None, kind=JOB_KIND,
              stdin=json.dumps(pip).encode())  # fmt: skip
    return BuildJob(job)


def main(argv: list[str] | None = None) -> int:
    """The job's process: pip's settings from stdin, then the build as the job in --job."""
    parser = argparse.ArgumentParser(prog=f"python -m {__name__}", description=__doc__)
    parser.add_argument("--job", required=True, help="run as the job in this folder")
    parser.add_argument("--jobs", type=int, default=2, help="parallel compile jobs")
    parser.add_argument("--portable", action="store_true", help="no -march=native")
    ns = parser.parse_args(argv)
    given = json.loads(sys.stdin.read() or "{}")  # before the launcher's handshake
    os.environ.update({k: str(v) for k, v in given.items() if k.startswith(PIP_PREFIX)})
    return jobs.run_job(ns.job, lambda: build_llama_cpp(jobs=ns.jobs, portable=ns.portable))


if __name__ == "__main__":
    sys.exit(main())
