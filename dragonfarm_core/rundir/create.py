"""Write a new run directory for a `RunSpec`: the data, status queued, then config.json.

    run_dir = write_run(RunSpec("sft", ds, "dragonfarm/tiny-support", lora=Lora(r=8)))
    run_dir = create_run("sft", ds, "dragonfarm/tiny-support", Lora(r=8), TrainArgs(epochs=1))

Nothing is written until everything has been checked (the spec validated itself; here: at least
one training row, a resolvable model, a free run directory), so a refusal never leaves half a
run behind. config.json is `spec.to_dict()` completed with what only writing knows, and it is
written last of the run's files: a folder with config.json is a complete run, which is what
`files.is_run_dir` tests. `training.start(spec)` writes and launches (`launch.start_run`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from dragonfarm_core import memory_estimate, methods
from dragonfarm_core.rundir import files, location
from dragonfarm_core.settings import Hardware, Lora, SettingsError, TrainArgs
from dragonfarm_core.spec import RunSpec, check_plain, is_run_folder, slugify

SCHEMA = 1


def _dataset_rows(spec: RunSpec) -> tuple[list[dict], list[dict]]:
    """(train, eval) records of the spec's dataset (its mapping was checked by the spec)."""
    if isinstance(spec.dataset, dict):
        raise TypeError(
            "RunSpec.dataset is a stored dataset description; a new run needs the dataset "
            f"itself: rebuild it (dragon.code(run) shows how) as dragon.dataset(...) mapped "
            f"with {spec.row.mapping_hint}."
        )
    dataset = spec.dataset
    train, held_out = dataset.split_records()
    if not train:
        raise ValueError(
            f"Dataset {dataset.name!r} has no training rows after the split; add "
            "rows or lower eval_frac with .split(eval_frac=...)."
        )
    return train, held_out


def _model_config(model: Any, revision: str | None, trust_remote_code: bool) -> dict[str, Any]:
    """config.json's model block (with continued_from) for a model name, a folder or a run."""
    from dragonfarm_core.rundir.run import Run  # run.py imports the launcher; only needed here

    if isinstance(model, Run) or is_run_folder(model):
        if revision is not None:
            raise ValueError(
                "revision= applies to a model id; a run's base model is fixed. "
                "Drop revision= when continuing from a run."
            )
        return _parent_model(model if isinstance(model, Run) else Run(model), trust_remote_code)
    if not isinstance(model, str | os.PathLike):
        raise TypeError(
            f"model must be a model id, a local folder or a finished Run, got "
            f"{type(model).__name__}."
        )
    from dragonfarm_core.models import resolve_model

    resolved = resolve_model(str(model), revision)
    return {
        "model": {
            "name": resolved.name,
            "base": resolved.base,
            "revision": resolved.revision,
            "trust_remote_code": trust_remote_code,
            "adapters": [],
        },
        "continued_from": None,
    }


def _parent_model(parent: Any, trust_remote_code: bool) -> dict[str, Any]:
    """Continue from a finished run: its base, its adapters plus its own, folded in that order."""
    state = parent.status().get("state")
    if state != "succeeded":
        raise ValueError(
            f"Run {parent.id} is {state}; only a succeeded run can be continued "
            "from. Wait for it with run.wait(), or pick a finished run."
        )
    adapter = files.adapter_dir(parent.dir)
    if not adapter.is_dir():
        raise ValueError(
            f"Run {parent.id} succeeded but has no adapter folder ({adapter}); "
            "it cannot be continued from."
        )
    model = parent.config["model"]
    return {
        "model": {
            "name": model["name"],
            "base": model["base"],
            "revision": model.get("revision"),
            "trust_remote_code": bool(model.get("trust_remote_code")) or trust_remote_code,
            "adapters": [*model.get("adapters", []), str(adapter)],
        },
        "continued_from": str(parent.dir),
    }


def _check_run_dir(run_dir: Any) -> Path | None:
    if run_dir is None:
        return None
    path = location.check_folder(Path(run_dir).expanduser().resolve(), "run_dir")
    if files.is_run_dir(path):
        raise FileExistsError(
            f"{path} is already a run; pick another run_dir, or leave "
            "run_dir=None for a new folder under the runs directory."
        )
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise FileExistsError(f"{path} exists and is not an empty folder; pick a new run_dir.")
    return path


def new_dir(run_dir: Any, runs_dir: Any, label: str) -> Path:
    """Create and return the run's folder: `run_dir` as given, or a fresh id under runs_dir."""
    path = _check_run_dir(run_dir)
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        return path
    root = location.check_folder(location.runs_dir(runs_dir))
    root.mkdir(parents=True, exist_ok=True)
    base = f"{time.strftime('%Y%m%d-%H%M%S')}-{slugify(label)}"
    for n in range(1, 1000):
        path = root / (base if n == 1 else f"{base}-{n}")
        try:
            path.mkdir()  # atomic: two sessions never get the same id
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"Could not find a free run id for {base} in {root}.")


def save_source(run_dir: Path, dataset: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """A dataset with no file gets its rows saved in the run, so code(run) can rebuild it."""
    if spec.get("source"):
        return spec
    if spec.get("mapping", {}).get("kind") == "conversations":
        rows = [{"messages": json.loads(cell)} for cell in dataset.frame["messages"]]
    else:
        rows = dataset.frame.to_dict(orient="records")
    path = run_dir / files.SOURCE_DATA
    files.write_jsonl(path, rows)
    return {**spec, "source": str(path), "format": "jsonl"}


def create_run(
    method: str,
    dataset: Any,
    model: Any,
    lora: Lora | None = None,
    args: TrainArgs | None = None,
    hardware: Hardware | None = None,
    name: str | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
    n_samples: int = 10,
    revision: str | None = None,
    trust_remote_code: bool = False,
    method_args: dict[str, Any] | None = None,
) -> Path:
    """`write_run` for settings given one by one, `method_args` as config.json holds them
    (a method's group defaults when None); `args=None` is TrainArgs()."""
    row = methods.method(method)
    values = {} if method_args is None else method_args
    if not isinstance(values, dict):
        raise ValueError("method_args must be a dict.")
    check_plain(values, "method_args")
    group = None if row.settings is None or method_args is None else row.settings.from_dict(values)
    if row.settings is None and values:
        raise SettingsError(f"method_args: {method} takes none, got {sorted(values)}.")
    spec = RunSpec(
        method, dataset, model,
        lora=Lora() if lora is None else lora, args=TrainArgs() if args is None else args,
        hardware=Hardware() if hardware is None else hardware, method_args=group, name=name,
        n_samples=n_samples, revision=revision, trust_remote_code=trust_remote_code,
    )  # fmt: skip
    return write_run(spec, run_dir, runs_dir)


def model_block(spec: RunSpec) -> dict[str, Any]:
    """config.json's model block for the spec's model (resolved: a Hub id is downloaded)."""
    return _model_config(spec.model, spec.revision, spec.trust_remote_code)


def write_run(
    spec: RunSpec,
    run_dir: str | os.PathLike[str] | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Write a complete run directory for `spec` in state queued; returns its path.

    config.json is `spec.to_dict()` completed with what only writing knows: the schema, the
    run's id and creation time, the resolved model block (base, adapters) and continued_from,
    the dataset's saved copy when it had no file, the row counts; a GRPO run's custom reward
    files are copied in first, and stored relative to the run.
    """
    if _check_run_dir(run_dir) is None:
        location.check_folder(location.runs_dir(runs_dir))
    train, held_out = _dataset_rows(spec)
    block = model_block(spec)
    memory_estimate.check(spec, block["model"]["base"], train)  # before anything is written
    label = spec.name or block["model"]["name"]
    path = new_dir(run_dir, runs_dir, label)
    try:
        group = None if spec.method_args is None else spec.method_args.copy_into(path)
        dataset = save_source(path, spec.dataset, spec.dataset_dict())
        files.write_jsonl(path / files.TRAIN_DATA, train)
        files.write_jsonl(path / files.EVAL_DATA, held_out)
        files.write_status(path, {"state": "queued", "queued_at": files.now_iso()})
        stored = spec.to_dict()
        files.write_config(path, {
            "schema": SCHEMA, "id": path.name, "name": spec.name or slugify(label),
            "method": spec.method, "created_at": files.now_iso(), **block,
            "dataset": dataset, "data": {"kind": spec.row.data_kind, "n_train": len(train),
                                         "n_eval": len(held_out)},
            **{key: stored[key] for key in ("lora", "args", "hardware", "n_samples")},
            "method_args": {} if group is None else group.to_dict(path),
        })  # fmt: skip
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)  # never leave half a run behind
        raise
    location.announce_run(path.parent)
    return path
