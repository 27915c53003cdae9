"""What a run's config.json must hold for its readers: an object, and each field they read of
the type they read it as.

config.json is written once, before launch (`create`), and never again; one of the wrong shape
(a hand edit, a bad copy, a disk fault) must not crash runs(), the Monitor or any other reader.
`config_problem` says what is wrong as the end of a sentence; `files.read_config` raises
ConfigDamagedError with it, and the run is listed as state "damaged". The settings groups'
own fields (args.batch_size ...) are checked where a RunSpec is read back (`spec`).
Pure standard library: the trainer and the app both import it.
"""

from __future__ import annotations

from typing import Any

from dragonfarm_core.rundir.status_schema import field_problem

CONFIG_FIELDS: dict[str, tuple[type, ...]] = {
    "schema": (int,),
    **dict.fromkeys(("id", "name", "method", "created_at", "continued_from"), (str,)),
    **dict.fromkeys(
        ("model", "dataset", "data", "lora", "args", "hardware", "method_args"), (dict,)
    ),  # fmt: skip
    "n_samples": (int,),
}
MODEL_FIELDS: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(("name", "base", "revision"), (str,)),
    "trust_remote_code": (bool,),
    "adapters": (list,),
}
DATA_FIELDS: dict[str, tuple[type, ...]] = {
    "kind": (str,),
    **dict.fromkeys(("n_train", "n_eval"), (int,)),
}
# The settings groups' fields that readers use before any RunSpec is made (triage's fixes, the
# Compare tab's settings, the launcher's devices), with the types settings.py gives them.
_NUMBER = (int, float)
GROUP_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "args": {
        **dict.fromkeys(("batch_size", "grad_accum", "max_seq_len", "max_steps", "logging_steps",
                         "save_steps", "seed"), (int,)),
        **dict.fromkeys(("epochs", "learning_rate", "warmup_ratio", "weight_decay"), _NUMBER),
        "gradient_checkpointing": (bool,),
        "extra": (dict,),
    },
    "lora": {"r": (int,), "alpha": _NUMBER, "dropout": _NUMBER},
    "hardware": {
        **dict.fromkeys(("device", "dtype", "accelerate_config"), (str,)),
        "load_in_4bit": (bool,),
        "devices": (int, str),
    },
}  # fmt: skip


class ConfigDamagedError(ValueError):
    """A run's config.json cannot be read as one: not JSON, or of the wrong shape."""


def config_problem(config: Any) -> str | None:
    """What makes `config` not a run's config.json (its shape, a field of the wrong type), as
    the end of a sentence; None when it is fine.

    >>> config_problem({"schema": 1, "id": ["a"], "method": "sft"})
    "its id is ['a'], not a string"
    >>> config_problem({"schema": 1, "method": "sft", "model": {"adapters": "a"}})
    "its model.adapters is 'a', not a list"
    """
    if not isinstance(config, dict):
        return f"it holds a JSON {type(config).__name__}, not an object"
    if problem := field_problem(config, CONFIG_FIELDS):
        return problem
    groups = {"model": MODEL_FIELDS, "data": DATA_FIELDS, **GROUP_FIELDS}
    for group, fields in groups.items():  # each an object or None, as checked above
        if problem := field_problem(config.get(group) or {}, fields, f"{group}."):
            return problem
    if not all(isinstance(a, str) for a in (config.get("model") or {}).get("adapters") or []):
        return "its model.adapters are not all folder names"
    return None
