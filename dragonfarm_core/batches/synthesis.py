"""Synthesis as a background job: what the app starts, and the job's side of it.

    job = dragon.start_synthesis("synthesize", prompts, {"teacher": claude}, {"min_chars": 20})
    job.progress(); job.cancel(); ds = job.result()     # the SynthesizedDataset, read back

`start_synthesis` writes the prompts, the models (as their descriptions: an API model's key
goes to the job on stdin, never into a file) and the settings into the job's spec through
`batches/jobs.py`; `job_work` runs in the child (rebuilds the models, runs `synthesize` or
`synthesize_pairs`, writes RESULT_FILE); `job_result` reads what it made back. Ctrl-C, or a
cancelled job, stops between requests and writes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dragonfarm_core.llm.base import LLM
from dragonfarm_core.llm.descriptions import api_key_of, llm_from_description
from dragonfarm_core.rundir import files, location
from dragonfarm_core.synthesis.asking import PromptRow, prompt_rows
from dragonfarm_core.synthesis.files import SynthesisError, SynthesizedDataset, open_synthesized
from dragonfarm_core.synthesis.pairs import synthesize_pairs
from dragonfarm_core.synthesis.quality import check_settings
from dragonfarm_core.synthesis.synthesize import synthesize

JOB_KINDS = ("synthesize", "synthesize_pairs")
RESULT_FILE = "result.json"  # in the job folder: the file written, or why nothing was
ROLES = {"synthesize": ("teacher", "judge"), "synthesize_pairs": ("student", "judge", "teacher")}


def start_synthesis(
    function: str,
    prompts: Any,
    models: dict[str, Any],
    settings: dict[str, Any],
    runs_dir: str | os.PathLike[str] | None = None,
) -> Any:
    """Start `synthesize` or `synthesize_pairs` as a job (`batches/jobs.py`) in <runs_dir>/jobs/;
    returns the `LLMJob` at once. models: "teacher", "student", "judge" -> an LLM (its key goes
    to the job on stdin, never into a file) or a model id / run folder (answered locally, the
    job then waits its turn for the device). settings: the function's other arguments."""
    from dragonfarm_core.batches import jobs as llm_jobs
    from dragonfarm_core.rundir import queue

    if function not in JOB_KINDS:
        raise ValueError(f"function = {function!r}; use one of {', '.join(JOB_KINDS)}.")
    settings = dict(settings)
    check_settings(function, **settings)
    rows = prompt_rows(prompts, settings.get("system"))
    if not rows:
        raise ValueError("No prompts to answer: map the data or pick a run with rows.")
    described: dict[str, Any] = {}
    keys: dict[str, str | None] = {}
    local = False
    for role in ROLES[function]:
        model = models.get(role)
        if model is None:
            continue
        if isinstance(model, LLM) and model.provider != "local":
            described[role] = model.describe()
            llm_from_description(described[role])  # refuse what the job cannot rebuild
            keys[role] = api_key_of(model)
        elif isinstance(model, LLM | str | os.PathLike):
            local = True
            described[role] = {"provider": "local", "model": str(getattr(model, "x", model))}
        else:
            raise TypeError(f"{role} must be an LLM, a model id or a run folder for a job.")
    home = location.runs_dir(runs_dir)
    spec = {
        "function": function,
        "prompts": [vars(r) for r in rows],
        "models": described,
        "args": {**settings, "runs_dir": str(home)},
    }
    device = queue.resolve_device("auto") if local else None
    return llm_jobs.start(function, spec, runs_dir=home, keys=keys, device=device)


def job_work(spec: dict[str, Any], context: Any) -> None:
    """The job's side (`llm_job_child.KINDS`): rebuild the models, run, write RESULT_FILE."""
    function = spec["function"]
    models = {}
    for role, description in (spec.get("models") or {}).items():
        local = description.get("provider") == "local"
        models[role] = description["model"] if local else context.llm(description, key=role)
    rows = [PromptRow(**r) for r in spec["prompts"]]
    run: Callable[..., SynthesizedDataset] = (
        synthesize if function == "synthesize" else synthesize_pairs
    )
    first = ROLES[function][0]
    record: dict[str, Any]
    try:
        ds = run(
            rows,
            models.pop(first),
            **models,
            **spec.get("args", {}),
            progress=lambda stage, done, total: context.progress(done, total, stage),
        )
        record = dict(ds.synthesis or {})
        result = {"file": ds.source, "synthesis": record}
    except SynthesisError as e:
        record = e.synthesis
        result = {"file": None, "error": str(e), "synthesis": record}
    finally:
        from dragonfarm_core.inference import worker_stop

        worker_stop()  # a local teacher's worker goes with the job
    files.write_json(Path(context.job_dir) / RESULT_FILE, result)
    print(f"[dragonfarm] {function}: kept {record['kept']} of {record['in']}", flush=True)


def job_result(job: Any) -> SynthesizedDataset:
    """What a finished synthesis job made, read back (`LLMJob.result()`); SynthesisError, with
    the record, when nothing was kept."""
    result = files.read_json(Path(job.job.dir) / RESULT_FILE)
    if not isinstance(result, dict):
        raise RuntimeError(f"The synthesis job wrote no {RESULT_FILE}; see its log.")
    if not result.get("file"):
        raise SynthesisError(str(result.get("error") or "Nothing was kept."), result["synthesis"])
    return open_synthesized(result["file"])
