"""Render a mapped frame into training records, and account for the rows that cannot be used.

The record shapes are the contract with the trainers (docs/ARCHITECTURE.md, "Data"):

- `sft`, `conversations`: {"messages": [{"role", "content"}, ...]}, the last one the assistant's.
- `pairs`: {"prompt": [... user], "chosen": [assistant], "rejected": [assistant]}.
- `prompts`: {"prompt": [... user], "reference": str | None, "fields": {other columns}}.

A row whose required field renders empty (a column it reads is empty or missing) is dropped; so
is a pair whose chosen and rejected replies are the same. A system prompt that renders empty for
a row is simply left out of that row, since a system turn is optional.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import pandas as pd

from dragonfarm_core.data.errors import DatasetError
from dragonfarm_core.data.templates import Slot, resolve

KINDS = ("sft", "conversations", "pairs", "prompts")
# The fields each kind must fill for a row to be usable, in the order they are reported.
REQUIRED = {
    "sft": ("prompt", "response"),
    "pairs": ("prompt", "chosen", "rejected"),
    "prompts": ("prompt", "reference"),
    "conversations": (),
}


@dataclass(frozen=True)
class Mapping:
    """Which columns or templates fill which slot; `kind` says which record shape results."""

    kind: str
    prompt: str | None = None
    response: str | None = None
    chosen: str | None = None
    rejected: str | None = None
    reference: str | None = None
    system: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise DatasetError(f"Mapping.kind={self.kind!r} is not one of {', '.join(KINDS)}.")

    def slots(self) -> dict[str, str]:
        """The mapped slots, e.g. {"prompt": "{subject}", "response": "reply"}."""
        return {
            f.name: v
            for f in fields(self)
            if f.name != "kind" and (v := getattr(self, f.name)) is not None
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; unmapped slots are None."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class Rendered:
    """The usable records, where each came from, and what was left out."""

    records: list[dict[str, Any]] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)  # 0-based frame row of each record
    empty: dict[str, list[int]] = field(default_factory=dict)  # slot -> rows where it was empty
    identical: list[int] = field(default_factory=list)  # pair rows with chosen == rejected


def resolve_slots(mapping: Mapping, columns: Sequence[str], source: str) -> dict[str, Slot]:
    """Check every slot of the mapping against the columns (raises naming what is missing)."""
    return {
        name: resolve(value, columns, name, source, literal_ok=(name == "system"))
        for name, value in mapping.slots().items()
    }


def render(frame: pd.DataFrame, mapping: Mapping, source: str) -> Rendered:
    """Every row of the frame through the mapping, keeping count of what had to be dropped."""
    if mapping.kind == "conversations":
        convs = [json.loads(cell) for cell in frame["messages"]]
        return Rendered([{"messages": c} for c in convs], list(range(len(convs))))
    slots = resolve_slots(mapping, [str(c) for c in frame.columns], source)
    used = {c for slot in slots.values() for c in slot.columns}
    others = [str(c) for c in frame.columns if str(c) not in used]
    out = Rendered(empty={name: [] for name, slot in slots.items() if slot.columns})
    for i, row in enumerate(frame.to_dict(orient="records")):
        values = {name: slot.render(row) for name, slot in slots.items()}
        for name, value in values.items():
            if value is None:
                out.empty[name].append(i)
        if any(values.get(name) is None for name in REQUIRED[mapping.kind] if name in slots):
            continue
        if (
            mapping.kind == "pairs"
            and str(values["chosen"]).strip() == str(values["rejected"]).strip()
        ):
            out.identical.append(i)
            continue
        out.records.append(_record(mapping.kind, values, {c: row[c] for c in others}))
        out.rows.append(i)
    return out


def _record(kind: str, values: dict[str, str | None], other: dict[str, Any]) -> dict[str, Any]:
    system = [{"role": "system", "content": values["system"]}] if values.get("system") else []
    prompt = [*system, {"role": "user", "content": values["prompt"]}]
    if kind == "sft":
        return {"messages": [*prompt, {"role": "assistant", "content": values["response"]}]}
    if kind == "pairs":
        return {
            "prompt": prompt,
            "chosen": [{"role": "assistant", "content": values["chosen"]}],
            "rejected": [{"role": "assistant", "content": values["rejected"]}],
        }
    return {"prompt": prompt, "reference": values.get("reference"), "fields": other}


def _rows(indices: list[int]) -> str:
    shown = ", ".join(str(i + 1) for i in indices[:5])
    return (
        f"row {shown}"
        if len(indices) == 1
        else f"rows {shown}{', ...' if len(indices) > 5 else ''}"
    )


def drop_summary(rendered: Rendered, mapping: Mapping) -> list[str]:
    """One phrase per reason rows were dropped, e.g. "2 with an empty response ('reply'): rows 4, 9"."""
    parts = []
    for name in REQUIRED[mapping.kind]:
        rows = rendered.empty.get(name, [])
        if rows:
            parts.append(
                f"{len(rows)} with an empty {name} ({getattr(mapping, name)!r}): {_rows(rows)}"
            )
    if rendered.identical:
        n = len(rendered.identical)
        parts.append(
            f"{n} whose chosen and rejected replies are identical: {_rows(rendered.identical)}"
        )
    return parts
