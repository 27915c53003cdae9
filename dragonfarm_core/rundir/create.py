"""Write a new run directory: validate everything, then config.json, the data, status queued.

    run_dir = create_run("sft", ds, "dragonfarm/tiny-support", Lora(r=8), TrainArgs(epochs=1))

Nothing is written until every argument has been checked (settings types, a dataset mapped for
the method with at least one training row, a resolvable model, a free run directory), so a
refusal never leaves half a run behind. config.json is written last of the run's files: a folder
with config.json is a complete run, which is what `files.is_run_dir` tests. Used by train(),
prefer(), reinforce() and bundle() alike; launching is `launch.start_run`'s job.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from dragonfarm_core.rundir import files, location
from dragonfarm_core.settings import Hardware, Lora, SettingsError, TrainArgs, to_dict
from dragonfarm_core.trainers.config import extra_args

SCHEMA = 1
# Which dataset mappings each method trains on.
METHOD_KINDS = {
    "sft": ("sft", "conversations"),
    "dpo": ("pairs",),
    "orpo": ("pairs",),
    "grpo": ("prompts",),
}
MAPPING_HINT = {
    "sft": ".map(prompt=..., response=...) or dragon.conversations()",
    "dpo": ".map_pairs(prompt=..., chosen=..., rejected=...)",
    "orpo": ".map_pairs(prompt=..., chosen=..., rejected=...)",
    "grpo": ".map_prompts(prompt=..., reference=...)",
}
DATA_KINDS = {
    "sft": "messages",
    "conversations": "messages",
    "pairs": "pairs",
    "prompts": "prompts",
}
# Keys that hold credentials; config.json must name an environment variable instead.
SECRET_KEY = re.compile(r"(api_?key|secret|password|(hf|hub|access|auth)_?token)$", re.IGNORECASE)


def _check_settings(lora: Any, args: Any, hardware: Any) -> None:
    for value, cls, arg in (
        (lora, Lora, "lora"),
        (args, TrainArgs, "args"),
        (hardware, Hardware, "hardware"),
    ):
        if not isinstance(value, cls):
            raise SettingsError(
                f"{arg} must be dragon.{cls.__name__}(...), got "
                f"{type(value).__name__}: {value!r:.80}."
            )


def _check_no_secrets(values: dict[str, Any], where: str) -> None:
    for key, value in values.items():
        if SECRET_KEY.search(str(key)) and value not in (None, "") and not key.endswith("_env"):
            raise SettingsError(
                f"{where}[{key!r}] looks like a credential, and config.json never holds one. "
                f"Put the secret in an environment variable and pass its name ({key}_env=...)."
            )
        if isinstance(value, dict):
            _check_no_secrets(value, f"{where}[{key!r}]")


def _check_json(value: Any, where: str) -> None:
    try:
        json.dumps(value, allow_nan=True)
    except (TypeError, ValueError) as e:
        raise SettingsError(
            f"{where} must hold plain JSON values (str, numbers, lists, dicts): {e}."
        ) from e


def _dataset_rows(method: str, dataset: Any) -> tuple[list[dict], list[dict]]:
    """(train, eval) records, after checking the dataset fits the method."""
    if method not in METHOD_KINDS:
        raise ValueError(f"method={method!r} is not one of {', '.join(METHOD_KINDS)}.")
    mapping = getattr(dataset, "mapping", None)
    if not callable(getattr(dataset, "split_records", None)):
        raise TypeError(
            f"dataset must be a dragon.dataset(...) mapped for training, got "
            f"{type(dataset).__name__}."
        )
    if mapping is None or mapping.kind not in METHOD_KINDS[method]:
        got = "not mapped" if mapping is None else f"mapped as {mapping.kind!r}"
        raise ValueError(
            f"{method} trains on a dataset mapped with {MAPPING_HINT[method]}, but "
            f"dataset {getattr(dataset, 'name', '?')!r} is {got}."
        )
    train, held_out = dataset.split_records()
    if not train:
        raise ValueError(
            f"Dataset {dataset.name!r} has no training rows after the split; add "
            "rows or lower eval_frac with .split(eval_frac=...)."
        )
    return train, held_out


def _is_run_folder(model: Any) -> bool:
    """A run directory given by path. A model folder has a config.json too, but not a run's."""
    if not isinstance(model, str | os.PathLike) or not files.is_run_dir(model):
        return False
    try:
        config = files.read_config(model)
    except ValueError:  # not JSON: not ours
        return False
    return isinstance(config, dict) and {"schema", "method", "dataset"} <= config.keys()


def _model_config(model: Any, revision: str | None, trust_remote_code: bool) -> dict[str, Any]:
    """config.json's model block (with continued_from) for a model name, a folder or a run."""
    from dragonfarm_core.rundir.run import Run  # run.py imports the launcher; only needed here

    if not isinstance(trust_remote_code, bool):
        raise SettingsError("trust_remote_code must be True or False.")
    if isinstance(model, Run) or _is_run_folder(model):
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


def slugify(text: str) -> str:
    """'Qwen/Qwen2.5-0.5B-Instruct' -> 'qwen2-5-0-5b-instruct' (the last path part)."""
    last = str(text).rstrip("/\\").replace("\\", "/").split("/")[-1]
    slug = re.sub(r"[^a-z0-9]+", "-", last.lower()).strip("-")
    return slug[:48].strip("-") or "run"


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


def _new_dir(run_dir: Any, runs_dir: Any, label: str) -> Path:
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


def _save_source(run_dir: Path, dataset: Any, spec: dict[str, Any]) -> dict[str, Any]:
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


def _check_arguments(
    lora: Any, args: Any, hardware: Any, name: Any, n_samples: Any, method_args: Any
) -> None:
    _check_settings(lora, args, hardware)
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ValueError(f"name must be a non-empty string or None, got {name!r}.")
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 0:
        raise ValueError(f"n_samples must be a whole number >= 0, got {n_samples!r}.")
    if not isinstance(method_args, dict):
        raise ValueError("method_args must be a dict.")
    for values, where in ((method_args, "method_args"), (args.extra, "TrainArgs.extra")):
        _check_json(values, where)
        _check_no_secrets(values, where)
    # TrainArgs passes keywords it does not know to the trainer in `extra`: refuse one the
    # trainer does not understand now, with the accepted list, not later in its log.
    extra_args(args.extra)


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
    """Validate, then write a complete run directory in state queued; returns its path."""
    lora = Lora() if lora is None else lora
    args = TrainArgs() if args is None else args
    hardware = Hardware() if hardware is None else hardware
    method_args = {} if method_args is None else method_args
    _check_arguments(lora, args, hardware, name, n_samples, method_args)
    if _check_run_dir(run_dir) is None:
        location.check_folder(location.runs_dir(runs_dir))
    train, held_out = _dataset_rows(method, dataset)
    model_block = _model_config(model, revision, trust_remote_code)
    label = name or model_block["model"]["name"]
    path = _new_dir(run_dir, runs_dir, label)
    try:
        spec = _save_source(path, dataset, dataset.spec())
        files.write_jsonl(path / files.TRAIN_DATA, train)
        files.write_jsonl(path / files.EVAL_DATA, held_out)
        files.write_status(path, {"state": "queued", "queued_at": files.now_iso()})
        data = {"kind": DATA_KINDS[dataset.mapping.kind], "n_train": len(train),
                "n_eval": len(held_out)}  # fmt: skip
        files.write_config(path, {
            "schema": SCHEMA, "id": path.name, "name": name or slugify(label),
            "method": method, "created_at": files.now_iso(), **model_block,
            "dataset": spec, "data": data, "lora": to_dict(lora), "args": to_dict(args),
            "hardware": to_dict(hardware), "n_samples": n_samples, "method_args": method_args,
        })  # fmt: skip
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)  # never leave half a run behind
        raise
    location.announce_run(path.parent)
    return path
