"""What each kind of pipeline step does: a call of the stage's public function on the chain.

Every handler takes the execution's `Context`, the step's index and the step, and returns the
step's summary (JSON-ready) for the record. A training step builds its `RunSpec`
(`TrainingStep.run_spec`) and starts it with `start(spec)`, as the Train tab and the command
line do, records the run at once, and waits for it (`watch_run`: cancellable, a checkpoint
first); a training step whose run is already in the record (a resumed pipeline) continues
that run, from its checkpoint, instead of starting a new one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from dragonfarm_core.judging.inputs import data_rows
from dragonfarm_core.judging.inputs import prompts as run_prompts
from dragonfarm_core.pipelines.context import Context, watch_run
from dragonfarm_core.pipelines.steps import (
    EvaluateStep,
    JudgeStep,
    MergeStep,
    PreferStep,
    PublishStep,
    Step,
    SynthesizePairsStep,
    TrainingStep,
)
from dragonfarm_core.rewards.task_metrics import last_number, parse_json
from dragonfarm_core.rundir import files
from dragonfarm_core.rundir import pipeline_record as record_io
from dragonfarm_core.rundir.run import Run, open_run
from dragonfarm_core.training.train import resume, start


def _numbers(values: dict[str, Any] | None) -> dict[str, float]:
    return {k: float(v) for k, v in (values or {}).items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}  # fmt: skip


def run_summary(run: Run) -> dict[str, Any]:
    """A finished training run's figures: its final metrics and its held-out evaluation."""
    status = run.status()
    return {"run": run.id, "method": run.method, "state": status.get("state"),
            **_numbers(status.get("metrics")), **_numbers(files.read_eval(run.dir))}  # fmt: skip


def _start_training(ctx: Context, step: Step) -> Run:
    assert isinstance(step, TrainingStep)
    spec = step.run_spec(ctx.target, name=f"{ctx.name}-{step.kind}", pairs=ctx.pairs)
    return start(spec, runs_dir=ctx.runs_dir)


def _training(ctx: Context, index: int, step: Step) -> dict[str, Any]:
    entry = record_io.read(ctx.path)["steps"][index]
    if entry.get("run_dir"):  # started before: resume that run rather than train again
        run = open_run(entry["run_dir"])
        state = run.status().get("state")
        if state not in files.ACTIVE_STATES and state != "succeeded":
            ctx.log(f"resuming run {run.id} ({state})")
            resume(run)
    else:
        run = _start_training(ctx, step)
        record_io.update_step(ctx.path, index, run=run.id, run_dir=str(run.dir))
        ctx.log(f"step {index + 1} ({step.kind}) trains run {run.id}")
    watch_run(ctx, run)
    if isinstance(step, PreferStep) and step.dataset is None:
        ctx.pairs = None  # used up
    ctx.run = run
    return run_summary(run)


def _synthesize_pairs(ctx: Context, index: int, step: Step) -> dict[str, Any]:
    from dragonfarm_core.judging.judges import as_judge
    from dragonfarm_core.synthesis.pairs import synthesize_pairs

    assert isinstance(step, SynthesizePairsStep)
    prompts = step.prompts
    if isinstance(prompts, str):
        assert ctx.run is not None  # pipeline_chain refused it otherwise
        prompts = run_prompts(ctx.run, prompts, n=step.n)
    elif isinstance(prompts, list | tuple):
        prompts = list(prompts)[: step.n]
    judge = step.judge if step.judge is not None else as_judge(None)
    pairs = synthesize_pairs(
        prompts, ctx.target, judge=judge, n_samples=step.n_samples_per_prompt,
        min_gap=step.min_gap, rubric=step.rubric, temperature=step.temperature,
        max_new_tokens=step.max_new_tokens, runs_dir=ctx.runs_dir, name=f"{ctx.name}-pairs",
    )  # fmt: skip
    ctx.pairs = pairs
    made = pairs.synthesis or {}
    return {"file": pairs.source, "rows": len(pairs), "in": made.get("in"),
            "dropped": made.get("dropped")}  # fmt: skip


def _judge(ctx: Context, index: int, step: Step) -> dict[str, Any]:
    from dragonfarm_core.judging.judgement import judge

    assert isinstance(step, JudgeStep) and ctx.run is not None
    result = judge(ctx.run, against=step.against, n=step.n, judge=step.judge,
                   rubric=step.rubric, progress=False)  # fmt: skip
    return {"run": ctx.run.id, "mode": result.mode, **dict(result.summary)}


def fitting_metrics(run: Run) -> list[str]:
    """The built-in metrics that fit a run's data: those comparing with a reference when its
    rows have one; numeric when every reference holds a number, json_valid when each is JSON."""
    rows = data_rows(run, "eval") or data_rows(run, "train")
    references = [r.reference for r in rows if r.reference]
    if not references or len(references) < len(rows):
        return []
    chosen = ["exact", "contains", "token_f1", "length_ratio"]
    if all(last_number(r) is not None for r in references):
        chosen.append("numeric")
    if all(parse_json(r)[0] for r in references):
        chosen.append("json_valid")
    return chosen


def _evaluate(ctx: Context, index: int, step: Step) -> dict[str, Any]:
    from dragonfarm_core.evaluation.evaluate import evaluate

    assert isinstance(step, EvaluateStep) and ctx.run is not None
    chosen = fitting_metrics(ctx.run) if step.metrics is True else list(step.metrics)
    n = int(ctx.run.config.get("n_samples", 10))
    result = evaluate(ctx.run, n_samples=n, metrics=chosen or None)
    metrics = {f"metric_{k}": v for k, v in result.metrics.items()}
    return {
        "run": ctx.run.id,
        **_numbers(result.results),
        **metrics,
        "samples": len(result.samples),
    }


def _merge(ctx: Context, index: int, step: Step) -> dict[str, Any]:
    from dragonfarm_core.export.merge import merge

    assert isinstance(step, MergeStep) and ctx.run is not None
    return {"run": ctx.run.id, "path": str(merge(ctx.run, out_dir=step.out))}


def _publish(ctx: Context, index: int, step: Step) -> dict[str, Any]:
    from dragonfarm_core.export.publishing import publish

    assert isinstance(step, PublishStep) and ctx.run is not None and step.repo
    url = publish(ctx.run, step.repo, what=step.what, private=step.private,
                  commit_message=step.commit_message, log=ctx.log)  # fmt: skip
    return {"run": ctx.run.id, "url": url, "what": step.what}


WORK: dict[str, Callable[[Context, int, Step], dict[str, Any]]] = {
    "train": _training, "prefer": _training, "reinforce": _training,
    "synthesize_pairs": _synthesize_pairs, "judge": _judge, "evaluate": _evaluate,
    "merge": _merge, "publish": _publish,
}  # fmt: skip
