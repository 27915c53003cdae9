"""Runs a pipeline's steps in order, writing its record after every change of state.

In the foreground `pipelines.pipeline()` calls `run_steps` itself; in the background the job
runner starts `python -m dragonfarm_core.pipelines.job RECORD`, which runs the same
`run_steps` inside `jobs.run_job`.

Each step calls the public function of its stage (train, prefer, reinforce, synthesize_pairs,
judge, evaluate, merge, publish) on what the chain holds: the latest training run and the
pairs of the latest synthesis. A cancel request (pipelines/<id>/cancel.request) is looked at
between steps, and while a training run trains (that run is then cancelled as `Run.cancel()`
does: a checkpoint first); judge, synthesis, evaluation and merge steps finish first. A
training step records its run as soon as it starts, so `resume_pipeline` picks up the run
(from its checkpoint) rather than training again. What a step does is in `pipelines.work`;
the execution's `Context`, which both read, is in `pipelines.context`.
"""

from __future__ import annotations

from typing import Any

from dragonfarm_core.pipelines.chain import label
from dragonfarm_core.pipelines.context import Context, PipelineCancelled
from dragonfarm_core.pipelines.steps import Step, step_from_dict
from dragonfarm_core.pipelines.work import WORK
from dragonfarm_core.rundir import files
from dragonfarm_core.rundir import pipeline_record as record_io
from dragonfarm_core.rundir.run import open_run
from dragonfarm_core.synthesis.files import open_synthesized


def steps_of(record: dict[str, Any], keys: dict[str, str] | None = None,
             start: int = 0) -> list[Step]:  # fmt: skip
    """The steps from `start` on, again from the record's specs (each judge with its key from
    `keys`); the steps before are not needed: the chain is read from their results."""
    out = []
    for i, entry in enumerate(record["steps"]):
        if i < start:
            continue
        try:
            out.append(step_from_dict(entry["spec"], (keys or {}).get(key_name(i))))
        except (TypeError, ValueError, OSError) as e:
            raise ValueError(f"{label(i, entry).capitalize()} cannot be made again: {e}") from e
    return out


def key_name(index: int) -> str:
    """The name a step's judge key travels under (stdin of the job)."""
    return f"step{index + 1}.judge"


def _restore(ctx: Context, record: dict[str, Any], start: int) -> None:
    """The chain as the steps before `start` left it (for a resumed pipeline)."""
    for entry in record["steps"][:start]:
        summary = entry.get("summary") or {}
        if entry.get("run_dir"):
            ctx.run = open_run(entry["run_dir"])
        if entry["kind"] == "synthesize_pairs" and summary.get("file"):
            ctx.pairs = open_synthesized(summary["file"])
        elif entry["kind"] == "prefer" and not entry["spec"].get("dataset"):
            ctx.pairs = None


def first_unfinished(record: dict[str, Any]) -> int:
    return next((i for i, s in enumerate(record["steps"]) if s["state"] != "succeeded"),
                len(record["steps"]))  # fmt: skip


def run_steps(ctx: Context, steps: list[Step], start: int = 0) -> dict[str, Any]:
    """Run the record's steps from `start` on (`steps`: those steps), recording after each
    change; the final record. A step that fails ends the pipeline failed (its error in the
    record, and raised); a cancel request ends it cancelled."""
    record = record_io.read(ctx.path)
    _restore(ctx, record, start)
    record_io.update(ctx.path, status="running", started_at=record.get("started_at")
                     or files.now_iso(), finished_at=None, error=None)  # fmt: skip
    for i, step in enumerate(steps, start):
        if ctx.cancel_requested():
            return _stopped(ctx, i)
        record_io.update(ctx.path, current=i)
        record_io.update_step(ctx.path, i, state="running", started_at=files.now_iso(),
                              finished_at=None, error=None)  # fmt: skip
        ctx.log(f"step {i + 1} ({step.kind}) started")
        try:
            summary = WORK[step.kind](ctx, i, step)
        except PipelineCancelled:
            return _stopped(ctx, i)
        except BaseException as e:
            error = f"{type(e).__name__}: {e}".strip()
            state = "cancelled" if isinstance(e, KeyboardInterrupt) else "failed"
            record_io.update_step(ctx.path, i, state=state, error=error[:2000],
                                  finished_at=files.now_iso())  # fmt: skip
            record_io.update(ctx.path, status=state, error=f"Step {i + 1} ({step.kind}): "
                             f"{error[:2000]}", finished_at=files.now_iso())  # fmt: skip
            ctx.log(f"step {i + 1} ({step.kind}) {state}: {error.splitlines()[0][:300]}")
            raise
        record_io.update_step(ctx.path, i, state="succeeded", summary=summary,
                              finished_at=files.now_iso())  # fmt: skip
        ctx.log(f"step {i + 1} ({step.kind}) succeeded")
    ctx.log("pipeline succeeded")
    return record_io.update(ctx.path, status="succeeded", current=None,
                            finished_at=files.now_iso())  # fmt: skip


def _stopped(ctx: Context, index: int) -> dict[str, Any]:
    """The pipeline stopped on request before (or during) step `index`."""
    entry = record_io.read(ctx.path)["steps"][index]
    if entry["state"] == "running":
        record_io.update_step(ctx.path, index, state="cancelled", finished_at=files.now_iso())
    ctx.log(f"pipeline cancelled before step {index + 1} finished")
    return record_io.update(ctx.path, status="cancelled", finished_at=files.now_iso())
