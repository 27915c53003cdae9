"""A Dataset again from what its `spec()` recorded: the file read again and mapped again.

A pipeline's stored step and triage's suggested retry both keep a dataset as its spec.
"""

from __future__ import annotations

from typing import Any

from dragonfarm_core.data.conversations import conversations
from dragonfarm_core.data.dataset import Dataset, dataset

_MAPPERS = {"sft": "map", "pairs": "map_pairs", "prompts": "map_prompts"}


def dataset_from_spec(spec: dict[str, Any]) -> Dataset:
    """The Dataset a `Dataset.spec()` describes, read again from its file and mapped again."""
    source, mapping = spec.get("source"), dict(spec.get("mapping") or {})
    if not source:
        raise ValueError(
            f"Dataset {spec.get('name')!r} was not read from a file, so a stored step cannot "
            "rebuild it; save it to a file (CSV, JSONL) and read it with dragon.dataset(path)."
        )
    kind = mapping.pop("kind", None)
    if kind == "conversations":
        ds = conversations(source, name=spec.get("name"))
    else:
        ds = dataset(source, format=spec.get("format"), name=spec.get("name"),
                     max_bytes=spec.get("max_bytes"), split=spec.get("hub_split"))  # fmt: skip
        if kind in _MAPPERS:
            ds = getattr(ds, _MAPPERS[kind])(**{k: v for k, v in mapping.items() if v is not None})
    if spec.get("split_set"):
        ds = ds.split(eval_frac=spec["eval_frac"], seed=spec["seed"])
    return ds
