"""A stand-in job for the job-runner tests: runs as a job (`jobs.run_job`) in milliseconds,
without torch.

    python tests/fake_job.py JOB_DIR [options]

  --steps N, --step-s S     the work: N steps of S seconds, a log line each ("step <i>")
  --fail                    raise RuntimeError("fake failure") after the steps
  --ignore-cancel           ignore SIGINT: a cancel request does not stop it (the kill must)
  --ignore-term             also ignore SIGTERM: only SIGKILL stops it
  --spawn-child             first start a process that sleeps (in the job's process group,
                            ignoring SIGTERM too); its pid goes to JOB_DIR/child.pid
  --argv-out FILE           write the arguments it was given (sys.argv[1:]) to FILE as JSON
  --note TEXT               any text (an argument to pass through, nothing else)
  --eval-of RUN_DIR         at the end, write RUN_DIR's eval.json and --n-samples samples, as
  --n-samples N             the evaluator (trainers/evaluate_run.py) does
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from dragonfarm_core.rundir import files, jobs

SLEEPER = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
FAKE_EVAL = {"eval_loss": 0.75, "perplexity": 2.117, "eval_tokens": 99, "step": 6}


def _work(ns: argparse.Namespace) -> None:
    for step in range(1, ns.steps + 1):
        time.sleep(ns.step_s)
        print(f"step {step}", flush=True)
    if ns.fail:
        print("about to fail", flush=True)
        raise RuntimeError("fake failure")
    if ns.eval_of:
        run = Path(ns.eval_of)
        samples = [
            {"prompt": f"q{i}", "reference": f"Reset it ({i}).", "generated": f"Reset it ({i})."}
            for i in range(ns.n_samples)
        ]
        files.write_samples(run, samples)
        files.write_eval(run, {**FAKE_EVAL, "eval_rows": ns.n_samples,
                               "recomputed_at": files.now_iso()})  # fmt: skip
        if (run / files.METRICS).exists():
            files.write_json(run / files.METRICS, {})


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("job_dir")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--step-s", type=float, default=0.01)
    parser.add_argument("--fail", action="store_true")
    parser.add_argument("--ignore-cancel", action="store_true")
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--spawn-child", action="store_true")
    parser.add_argument("--argv-out")
    parser.add_argument("--note")
    parser.add_argument("--eval-of")
    parser.add_argument("--n-samples", type=int, default=2)
    ns = parser.parse_args()
    if ns.argv_out:
        Path(ns.argv_out).write_text(json.dumps(sys.argv[1:]), encoding="utf-8")
    if ns.ignore_cancel:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if ns.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if ns.spawn_child:
        child = subprocess.Popen([sys.executable, "-c", SLEEPER])
        (Path(ns.job_dir) / "child.pid").write_text(str(child.pid), encoding="utf-8")
    return jobs.run_job(ns.job_dir, lambda: _work(ns))


if __name__ == "__main__":
    sys.exit(main())
