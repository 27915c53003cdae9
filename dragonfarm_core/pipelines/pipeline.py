"""`pipeline()`: the post-training loop as one declared, resumable job.

    p = dragon.pipeline("dragonfarm/tiny-support", [
        dragon.steps.train(ds),
        dragon.steps.synthesize_pairs(judge=dragon.judge_anthropic()),
        dragon.steps.prefer(),
        dragon.steps.judge(against="base", judge=dragon.judge_anthropic()),
    ], background=True)
    dragon.pipeline_status(p)["status"]    # queued, running, succeeded, failed, cancelled
    dragon.pipeline_cancel(p)              # stops between steps (a training run: checkpoint)
    dragon.resume_pipeline(p)              # from the first unfinished step
    dragon.compare(p)                      # its runs side by side

The steps are checked as a chain before anything runs (`pipeline_chain`), the record
`pipelines/<id>.json` is written (`pipeline_record`), and the steps run here
(foreground) or in a job that outlives this process (background, `pipeline_runner`).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from dragonfarm_core.judging.judges import as_judge
from dragonfarm_core.llm import LLM
from dragonfarm_core.llm.descriptions import api_key_of
from dragonfarm_core.pipelines.chain import check_steps
from dragonfarm_core.pipelines.context import Context
from dragonfarm_core.pipelines.runner import (
    first_unfinished,
    key_name,
    run_steps,
    steps_of,
)
from dragonfarm_core.pipelines.steps import Step
from dragonfarm_core.rundir import files, location
from dragonfarm_core.rundir import pipeline_record as record_io
from dragonfarm_core.rundir.run import Run, open_run

CANCEL_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Pipeline:
    """A pipeline: its record (read afresh on every call) and, while it runs in the
    background, its job. Made again from an id or a record path with `open_pipeline`."""

    path: Path

    @property
    def id(self) -> str:
        return self.path.stem

    def status(self) -> dict[str, Any]:
        """The record (see `pipeline_record`), a dead pipeline process reported failed."""
        return record_io.live(self.path)

    @property
    def state(self) -> str | None:
        return self.status().get("status")

    @property
    def runs(self) -> list[Run]:
        """The runs its training steps made, in order."""
        return [open_run(d) for d in record_io.run_dirs(record_io.read(self.path))]

    @property
    def summaries(self) -> list[dict[str, Any] | None]:
        return [s.get("summary") for s in record_io.read(self.path)["steps"]]

    def logs(self, n: int = 50) -> list[str]:
        return files.read_tail(record_io.log_path(self.path), n)

    def wait(self, timeout: float | None = None, poll: float = 0.5) -> dict[str, Any]:
        """Block until the pipeline ends; its final record (TimeoutError after `timeout` s)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        record = self.status()
        while record.get("status") in record_io.ACTIVE:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"Pipeline {self.id} is still {record.get('status')} after "
                                   f"{timeout:g} s; it keeps going.")  # fmt: skip
            time.sleep(poll)
            record = self.status()
        return record

    def cancel(self, wait: bool = True, timeout: float = CANCEL_TIMEOUT_S) -> dict[str, Any]:
        return pipeline_cancel(self, wait=wait, timeout=timeout)

    def __fspath__(self) -> str:
        """The record's path: a Pipeline goes wherever a path to it does (code, compare)."""
        return str(self.path)

    def __repr__(self) -> str:
        record = record_io.read(self.path)
        done = sum(s["state"] == "succeeded" for s in record["steps"])
        return (f"<Pipeline {self.id!r} {record.get('status')}: {done}/{len(record['steps'])} "
                f"steps at {self.path}>")  # fmt: skip


def open_pipeline(x: Any, runs_dir: str | os.PathLike[str] | None = None) -> Pipeline:
    """A pipeline by handle, id (in the runs dir) or record path."""
    return x if isinstance(x, Pipeline) else Pipeline(record_io.find(x, runs_dir))


def _model_text(model: Any) -> str:
    if isinstance(model, Run):
        return str(model.dir)
    if isinstance(model, str | os.PathLike) and str(model).strip():
        return os.fspath(model)
    raise TypeError(f"model must be a model id, a local folder or a finished Run, got {model!r}.")


def _specs(steps: list[Step], folder: Path) -> list[dict[str, Any]]:
    """The steps' specs for the record; a dataset that lived only in memory gets its rows
    saved in the pipeline's folder, so the record alone can replay the step."""
    from dragonfarm_core.rundir.create import save_source

    specs = []
    for i, step in enumerate(steps):
        spec = step.to_dict()
        for key in ("dataset", "prompts"):
            if isinstance(spec.get(key), dict) and not spec[key].get("source"):
                spec[key] = save_source(folder / f"step{i + 1}", getattr(step, key), spec[key])
        specs.append(spec)
    return specs


def _with_default_judges(steps: list[Step]) -> list[Step]:
    """judge=None is Claude (ANTHROPIC_API_KEY): made here, so a background job (whose
    environment holds no key) gets it by description, its key on stdin."""
    import dataclasses

    return [dataclasses.replace(s, judge=as_judge(None))  # type: ignore[call-arg]
            if getattr(s, "judge", "") is None else s for s in steps]  # fmt: skip


def _keys(steps: list[Step], start: int) -> bytes:
    """The judges' keys, by step (steps[0] is step `start`), for the job's stdin."""
    judges = {i: getattr(s, "judge", None) for i, s in enumerate(steps, start)}
    keys = {key_name(i): api_key_of(j) for i, j in judges.items() if isinstance(j, LLM)}
    return json.dumps({k: v for k, v in keys.items() if v}).encode()


def pipeline(
    model: Any,
    steps: list[Step],
    runs_dir: str | os.PathLike[str] | None = None,
    name: str = "pipeline",
    background: bool = False,
) -> Pipeline:
    """Run `steps` in order from `model` (a model id, a folder or a finished Run), each
    stage threaded into the next (see `pipeline_chain`); invalid chains are refused first.

    Foreground: returns when the last step is done (`.runs`, `.summaries`, `.status()`); a
    step that fails raises, with the record saying which. background=True: the steps run in
    a job that outlives this process, and the handle returns at once; judges must then be
    ones the job can rebuild (Anthropic, OpenAI-compatible, local), never a chatlas chat.
    """
    model_text = _model_text(model)
    checked = check_steps(steps, background=background)
    if background:
        checked = _with_default_judges(checked)
    home = location.runs_dir(runs_dir)
    path = record_io.create(home, name, model_text, [], background)
    record_io.update(path, steps=record_io.step_entries(_specs(checked, record_io.folder(path))))
    return _launch(Pipeline(path), checked, background, 0)


def _launch(p: Pipeline, steps: list[Step], background: bool, start: int) -> Pipeline:
    record = record_io.update(p.path, background=background, status="queued",
                              finished_at=None, error=None, log_tail=None)  # fmt: skip
    if background:
        from dragonfarm_core.pipelines.job import command

        pid = record_io.job(p.path).start(
            command(p.path), stdin=_keys(steps, start), kind="pipeline"
        )
        record_io.update(p.path, pid=pid)
        return p
    files.clear_cancel(record_io.folder(p.path))
    me = psutil.Process()
    record_io.update(p.path, pid=me.pid, pid_create_time=me.create_time())
    ctx = Context(p.path, p.path.parent.parent, record["name"], record["model"])
    run_steps(ctx, steps, start)
    return p


def list_pipelines(runs_dir: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Every pipeline in the runs dir, newest first: id, name, model, status, steps done and
    in all, the step under way, created_at (a dead one reported failed, as pipeline_status)."""
    rows = []
    for path in sorted(record_io.root(runs_dir).glob(f"*{record_io.RECORD_SUFFIX}"), reverse=True):
        try:
            record = record_io.live(path)
        except (OSError, ValueError):
            continue  # not a record (or one being written for the first time)
        steps = record["steps"]
        rows.append({"id": record.get("id"), "name": record.get("name"),
                     "model": record.get("model"), "status": record.get("status"),
                     "done": sum(s["state"] == "succeeded" for s in steps), "steps": len(steps),
                     "current": record.get("current"), "created_at": record.get("created_at"),
                     "path": str(path)})  # fmt: skip
    return rows


def pipeline_status(x: Any, runs_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The pipeline's record: status, steps (state, run, summary, error), timestamps."""
    return open_pipeline(x, runs_dir).status()


def pipeline_cancel(
    x: Any,
    runs_dir: str | os.PathLike[str] | None = None,
    wait: bool = True,
    timeout: float = CANCEL_TIMEOUT_S,
) -> dict[str, Any]:
    """Ask the pipeline to stop: between steps, a training step's run cancelled (checkpoint
    first), a judge, synthesis or merge step finishing. wait: return once it stopped; a
    background pipeline still going after `timeout` s is killed (and its training run
    cancelled). Returns the record."""
    p = open_pipeline(x, runs_dir)
    record = p.status()
    if record.get("status") not in record_io.ACTIVE:
        return record
    files.request_cancel(record_io.folder(p.path))
    if not wait:
        return record
    try:
        return p.wait(timeout=timeout)
    except TimeoutError:
        if not record.get("background"):
            raise
    record_io.job(p.path).cancel(timeout=0)  # kills its process group
    record = record_io.read(p.path)
    for d in record_io.run_dirs(record):
        if Run(d).status().get("state") in files.ACTIVE_STATES:
            Run(d).cancel(timeout=0)  # a trainer runs in a session of its own: not killed above
    now = files.now_iso()
    for step in record["steps"]:
        if step["state"] == "running":
            step.update(state="cancelled", finished_at=now)
    error = f"Killed: it did not stop within {timeout:g} s of the cancel request."
    record.update(status="cancelled", finished_at=now, error=error)
    record_io.write(p.path, record)
    return record


def resume_pipeline(
    x: Any,
    runs_dir: str | os.PathLike[str] | None = None,
    background: bool | None = None,
    steps: list[Step] | None = None,
) -> Pipeline:
    """Continue a failed or cancelled pipeline from its first unfinished step (a half-done
    training step from its run's checkpoint). background: None keeps how it ran. steps: the
    same steps again, needed only when one still to run holds what a record cannot (a Python
    function as judge); else they are made from the record."""
    p = open_pipeline(x, runs_dir)
    record = p.status()
    if record.get("status") in record_io.ACTIVE:
        raise RuntimeError(f"Pipeline {p.id} is {record['status']}; wait for it or cancel it.")
    if record.get("status") == "succeeded":
        raise RuntimeError(f"Pipeline {p.id} already succeeded; there is nothing to resume.")
    in_background = bool(record.get("background") if background is None else background)
    start = first_unfinished(record)
    if steps is None:
        todo = steps_of(record, start=start)  # a judge a job cannot rebuild is refused here
    else:
        given = check_steps(steps, background=in_background)
        if [s.kind for s in given] != [s["kind"] for s in record["steps"]]:
            raise ValueError(f"steps= must be the steps pipeline {p.id} was declared with.")
        todo = given[start:]
    if in_background:
        todo = _with_default_judges(todo)
    return _launch(p, todo, in_background, start)
