"""The sweep's process: `python -m dragonfarm_core.sweeps.job RECORD`.

`sweep()` starts it through the job runner (folder sweeps/<id>/), a judge's key on stdin as a
pipeline's are. It opens the study (`sweeps.study`), first finishes a trial a killed or
cancelled process left running (its run followed if still training, resumed from its
checkpoint if not), then asks Optuna for trials until `n_trials` have ended. Each trial is a
normal run (`start(spec)`: the machine's device queue, one at a time per device), followed
while it trains: each held-out figure it logs is reported to the trial, and a trial the
pruner stops is cancelled (a checkpoint first: a pruned trial is a cancelled run, never a
deleted one). A finished run's objective is read as Compare reads it, after `evaluate()` or
`judge()` where the objective is theirs. A cancel request stops the sweep between polls: the
trial's run is cancelled with a checkpoint and stays the trial to resume.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from pathlib import Path
from typing import Any

import optuna

from dragonfarm_core.batches.child import run_record_job
from dragonfarm_core.data.from_spec import dataset_from_spec
from dragonfarm_core.rundir import files, location, sweep_record
from dragonfarm_core.rundir.run import Run, open_run
from dragonfarm_core.spec import RunSpec
from dragonfarm_core.sweeps.space import EVALUATIONS, PRUNED_ON, apply, total_steps
from dragonfarm_core.sweeps.study import distributions, finished, mirror, open_study
from dragonfarm_core.training.train import resume, start

POLL_S = 0.5
CANCEL_TIMEOUT_S = 120.0
JUDGE_KEY = "judge"
MODULE = "dragonfarm_core.sweeps.job"


class SweepCancelled(Exception):
    """The sweep was asked to stop; the trial under way stays running in the study."""


class Sweeper:
    """One execution of a sweep: its record, study, and how it logs."""

    def __init__(self, path: Path, keys: dict[str, str]) -> None:
        self.path = path
        self.record = sweep_record.read(path)
        self.keys = keys
        self.study = open_study(path, self.record)
        self.space = distributions(self.record["space"])
        self._dataset: Any = None

    def log(self, message: str) -> None:
        print(f"[sweep] {files.now_iso()} {message}", flush=True)

    def cancel_requested(self) -> bool:
        return files.cancel_requested(sweep_record.folder(self.path))

    def mirror(self, **changes: Any) -> dict[str, Any]:
        return mirror(self.path, self.study, **changes)

    # -- a trial's run ----------------------------------------------------------------------

    def trial_spec(self, trial: optuna.Trial) -> RunSpec:
        spec = RunSpec.from_dict(apply(self.record["base"], trial.params))
        if self._dataset is None:
            self._dataset = dataset_from_spec(spec.dataset)
        name = f"{self.record['name']}-t{trial.number}"
        spec = dataclasses.replace(spec, dataset=self._dataset, name=name)
        return self.evaluated_often(spec) if self.record["prune"] else spec

    def evaluated_often(self, spec: RunSpec) -> RunSpec:
        """The spec with the held-out figure logged EVALUATIONS times a run (the trainer's
        default is 4) where its settings leave eval_steps unset: the pruner can stop a trial
        only where it reports, so more reports stop a bad one sooner. The held-out rows are
        scored without changing the training (bench/sweep.py: the same final losses as with 4)."""
        args = spec.args
        assert args is not None  # RunSpec fills it
        if args.extra.get("eval_steps") is not None:
            return spec
        total = total_steps(args, len(self._dataset.split_records()[0]))
        extra = {**args.extra, "eval_steps": max(1, total // EVALUATIONS)}
        return dataclasses.replace(spec, args=dataclasses.replace(args, extra=extra))

    def start_trial(self) -> None:
        trial = self.study.ask(self.space)
        shown = ", ".join(f"{k.split('.', 1)[1]}={v:g}" if isinstance(v, float) else
                          f"{k.split('.', 1)[1]}={v}" for k, v in trial.params.items())  # fmt: skip
        try:
            run = start(self.trial_spec(trial), runs_dir=self.path.parent.parent)
        except Exception as e:
            self.fail(trial, f"the run could not start: {type(e).__name__}: {e}")
            return
        trial.set_user_attr("run", run.id)
        trial.set_user_attr("run_dir", str(run.dir))
        self.mirror()
        self.log(f"trial {trial.number} ({shown}) trains run {run.id}")
        self.follow(trial, run)

    def fail(self, trial: optuna.Trial, error: str) -> None:
        trial.set_user_attr("error", error[:2000])
        self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        self.mirror()
        self.log(f"trial {trial.number} failed: {error.splitlines()[0][:300]}")

    def follow(self, trial: optuna.Trial, run: Run, reported: set[int] | None = None) -> None:
        """Watch the trial's run to its end: report, prune, cancel; then tell its result.
        reported: the steps already reported (a resumed trial's)."""
        column = PRUNED_ON.get(self.record["objective"]) if self.record["prune"] else None
        reported = set() if reported is None else reported
        while True:
            state = run.status().get("state")
            worse = column is not None and self.report(trial, run, column, reported)
            if worse and state in files.ACTIVE_STATES:
                self.log(f"trial {trial.number} pruned at step {max(reported)}: its held-out "
                         f"{column} is worse than the median; cancelling run {run.id} "
                         "(a checkpoint first)")  # fmt: skip
                run.cancel(timeout=CANCEL_TIMEOUT_S)
                if run.status().get("state") != "succeeded":
                    self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                    self.mirror()
                    return
                state = "succeeded"  # it ended before the cancel reached it: a result
            if state not in files.ACTIVE_STATES:
                break
            if self.cancel_requested():
                self.log(f"cancelling run {run.id} of trial {trial.number} (a checkpoint first)")
                run.cancel(timeout=CANCEL_TIMEOUT_S)
                raise SweepCancelled
            time.sleep(POLL_S)
        status = run.status()
        if status.get("state") != "succeeded":
            error = status.get("error") or f"run {run.id} ended {status.get('state')}"
            self.fail(trial, f"run {run.id} {status.get('state')}: {error}")
            return
        try:
            value = self.objective(run)
        except Exception as e:
            self.fail(trial, f"its {self.record['objective']} could not be measured: "
                      f"{type(e).__name__}: {e}")  # fmt: skip
            return
        if value is None:
            self.fail(trial, f"run {run.id} has no {self.record['objective']}")
            return
        self.study.tell(trial, value)
        self.mirror()
        self.log(f"trial {trial.number} complete: {self.record['objective']} = {value:.4g}")

    def report(self, trial: optuna.Trial, run: Run, column: str, reported: set[int]) -> bool:
        """Report the held-out figures logged since the last look; whether to prune."""
        new = False
        for row in files.read_progress(run.dir):
            step, value = row.get("step"), row.get(column)
            if not isinstance(step, int) or step <= 0 or step in reported:
                continue
            if isinstance(value, int | float) and math.isfinite(value):
                trial.report(float(value), step)
                reported.add(step)
                new = True
        if new:
            self.mirror()
        return new and trial.should_prune()

    def objective(self, run: Run) -> float | None:
        """The finished run's objective, as Compare reads it (after evaluate or judge)."""
        objective = self.record["objective"]
        if objective.startswith("metric_"):
            from dragonfarm_core.evaluation.evaluate import evaluate

            name = objective.removeprefix("metric_")
            n = int(run.config.get("n_samples") or 10)
            result = evaluate(run, n_samples=max(n, 1), metrics=[name])
            value = result.metrics.get(name)
            return float(value) if isinstance(value, int | float) else None
        if objective.startswith("judge_"):
            self.judge(run, objective)
        from dragonfarm_core.evaluation.compare import compare

        value = compare(run).iloc[0][objective]
        return None if value is None or not math.isfinite(value) else float(value)

    def judge(self, run: Run, objective: str) -> None:
        from dragonfarm_core.judging.judgement import judge
        from dragonfarm_core.llm.descriptions import llm_from_description

        stored = self.record["judge"]
        made = stored if isinstance(stored, str) else llm_from_description(
            stored, self.keys.get(JUDGE_KEY))  # fmt: skip
        against = None if objective == "judge_mean_score" else "base"
        judge(run, against=against, judge=made, progress=False)

    # -- the sweep --------------------------------------------------------------------------

    def resume_running(self) -> None:
        """Trials a killed or cancelled sweep left running: follow, resume or fail each."""
        running = self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        for frozen in running:
            trial = optuna.Trial(self.study, frozen._trial_id)
            run_dir = frozen.user_attrs.get("run_dir")
            if not run_dir:
                self.fail(trial, "its run never started (the sweep stopped first)")
                continue
            try:
                run = open_run(run_dir)
                state = run.status().get("state")
                if state not in files.ACTIVE_STATES and state != "succeeded":
                    self.log(f"trial {frozen.number}: resuming run {run.id} ({state})")
                    resume(run)
            except Exception as e:
                self.fail(trial, f"its run cannot go on: {type(e).__name__}: {e}")
                continue
            self.log(f"trial {frozen.number}: following run {run.id}")
            self.follow(trial, run, set(frozen.intermediate_values))

    def run(self) -> dict[str, Any]:
        self.mirror(status="running", started_at=self.record.get("started_at") or files.now_iso(),
                    finished_at=None, error=None)  # fmt: skip
        self.resume_running()
        n = self.record["n_trials"]
        while finished(self.study) < n:
            if self.cancel_requested():
                raise SweepCancelled
            self.start_trial()
        record = self.mirror(status="succeeded", finished_at=files.now_iso())
        if record["best"] is None:
            error = "No trial completed: every one failed (see the trials' errors)."
            return self.mirror(status="failed", error=error)
        best = next(t for t in record["trials"] if t["number"] == record["best"])
        self.log(f"sweep succeeded: best trial {best['number']} ({record['objective']} = "
                 f"{best['value']:.4g}, run {best['run']})")  # fmt: skip
        return record


def command(path: Path) -> list[str]:
    """The job's argv for the record at `path`."""
    return [sys.executable, "-m", MODULE, str(path)]


def work(path: Path, keys: dict[str, str]) -> None:
    """Run the sweep at `path`: its next trials, or the one it was training."""
    location.set_runs_dir(path.parent.parent)
    sweeper = Sweeper(path, keys)
    try:
        record = sweeper.run()
    except SweepCancelled:
        sweeper.mirror(status="cancelled", finished_at=files.now_iso())
        sweeper.log("sweep cancelled; resume it with dragon.resume_sweep(id)")
        raise KeyboardInterrupt from None  # the job ends cancelled
    except BaseException as e:
        sweeper.mirror(status="failed", finished_at=files.now_iso(),
                       error=f"{type(e).__name__}: {e}"[:2000])  # fmt: skip
        raise
    if record["status"] == "failed":
        raise RuntimeError(record["error"])


def main(argv: list[str] | None = None) -> int:
    return run_record_job(argv, MODULE, "sweep", sweep_record.folder, work)


if __name__ == "__main__":
    sys.exit(main())
