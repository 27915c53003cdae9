"""The Train tab's memory line: the preflight estimate (`dragon.preflight`) for the settings as
they are typed, against what the device has, and the changes that would fit when it does not.

The estimate reads the model's config.json (the Model tab's folder, or the base of the run to
continue from) and the longest training row; a dataset's row lengths are measured once and
kept for as long as the dataset is the mapped one (a Dataset is immutable).
"""

from __future__ import annotations

import html
from typing import Any

import dragonfarm_core as dragon
from dragonfarm_core.rundir import files

_rows_seen: dict[int, tuple[Any, list[dict[str, Any]]]] = {}


def _longest_rows(dataset: Any) -> list[dict[str, Any]]:
    """The dataset's longest training row, as a one-row list (what the estimate reads)."""
    key = id(dataset)
    if key not in _rows_seen or _rows_seen[key][0] is not dataset:
        rows = dataset.split_records()[0]
        longest = max(rows, key=lambda r: len(str(r)), default=None)
        _rows_seen.clear()  # one mapped dataset per session at a time is the common case
        _rows_seen[key] = (dataset, [longest] if longest else [])
    return _rows_seen[key][1]


def model_folder(spec: dragon.RunSpec, model: dragon.ResolvedModel, parent: str | None) -> str:
    """The folder whose config.json gives the model's shape."""
    if parent:
        return str(files.read_config(parent)["model"]["base"])
    return model.base


def memory_html(spec: dragon.RunSpec, model: dragon.ResolvedModel, parent: str | None) -> str:
    """The line under the settings; empty when the model's config gives no sizes."""
    est = dragon.preflight(spec, model_dir=model_folder(spec, model, parent),
                           rows=_longest_rows(spec.dataset))  # fmt: skip
    if est is None:
        return ""
    if est.fits:
        return f"<p class='df-hint' id='train-memory-fits'>{html.escape(est.summary())}</p>"
    return (
        "<div class='df-error' role='alert' style='border:1px solid #f59e0b;background:#fffbeb;"
        "color:#78350f;border-radius:8px;padding:10px 14px'>"
        f"{html.escape(est.refusal())}</div>"
    )
