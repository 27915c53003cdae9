"""`Dataset`: a table of text plus how its columns map onto training records, and `dataset()`.

    ds = dragon.dataset("tickets.csv").map(prompt="{subject}\\n\\n{body}", response="reply")
    train, held_out = ds.split(eval_frac=0.1).split_records()

A `Dataset` is immutable: `map`, `map_pairs`, `map_prompts` and `split` return a new one. The
mapping is checked against the columns when it is made; rows are rendered by `records()`.
"""

from __future__ import annotations

import dataclasses
import os
import random
import warnings
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dragonfarm_core.data.cells import normalise_frame
from dragonfarm_core.data.errors import DatasetError, DatasetWarning
from dragonfarm_core.data.hf_datasets import (
    DEFAULT_SPLIT,
    HUB_FORMAT,
    hf_frame,
    hub_frame,
    is_hf_dataset,
    is_hub_id,
)
from dragonfarm_core.data.preview import format_preview, preview_messages
from dragonfarm_core.data.readers import read_file
from dragonfarm_core.data.records import Mapping, Rendered, drop_summary, render, resolve_slots
from dragonfarm_core.data.report import DataReport, build_report

DEFAULT_EVAL_FRAC = 0.05
DEFAULT_SEED = 42
MIN_ROWS_FOR_DEFAULT_SPLIT = 20


@dataclass(frozen=True, eq=False, repr=False)
class Dataset:
    """A table of text cells (`frame`), where it came from, its mapping and its split."""

    frame: pd.DataFrame
    name: str
    source: str | None = None
    format: str | None = None
    mapping: Mapping | None = None
    eval_frac: float = DEFAULT_EVAL_FRAC
    seed: int = DEFAULT_SEED
    split_set: bool = False  # True once split() was called; the under-20-rows rule is for defaults
    max_bytes: int | None = None
    hub_split: str | None = None  # the split of the Hub dataset `source` names (format "hub")

    @property
    def columns(self) -> list[str]:
        return [str(c) for c in self.frame.columns]

    @property
    def label(self) -> str:
        """How messages name this dataset: its file, or its name when it lives in memory."""
        return self.source or f"dataset {self.name!r}"

    def __len__(self) -> int:
        return len(self.frame)

    # -- mapping -------------------------------------------------------------------------
    def _mapped(self, mapping: Mapping) -> Dataset:
        if self.mapping is not None and self.mapping.kind == "conversations":
            raise DatasetError(
                f"{self.label} already holds whole conversations; map() and friends are for "
                f"tables. Build a table with dragon.dataset() to map columns."
            )
        resolve_slots(mapping, self.columns, self.label)  # fails now, not at training time
        return dataclasses.replace(self, mapping=mapping)

    def map(self, prompt: str, response: str, system: str | None = None) -> Dataset:
        """One user turn and one assistant turn per row (supervised fine-tuning)."""
        return self._mapped(Mapping("sft", prompt=prompt, response=response, system=system))

    def map_pairs(
        self, prompt: str, chosen: str, rejected: str, system: str | None = None
    ) -> Dataset:
        """A prompt with a preferred and a rejected reply per row (DPO, ORPO)."""
        return self._mapped(
            Mapping("pairs", prompt=prompt, chosen=chosen, rejected=rejected, system=system)
        )

    def map_prompts(
        self, prompt: str, reference: str | None = None, system: str | None = None
    ) -> Dataset:
        """A prompt per row, optionally a reference answer; other columns travel as `fields` (GRPO)."""
        return self._mapped(Mapping("prompts", prompt=prompt, reference=reference, system=system))

    def split(self, eval_frac: float = DEFAULT_EVAL_FRAC, seed: int = DEFAULT_SEED) -> Dataset:
        """Hold out `eval_frac` of the rows for evaluation, chosen by `seed` (deterministic)."""
        if isinstance(eval_frac, bool) or not isinstance(eval_frac, int | float):
            raise DatasetError(f"eval_frac must be a number between 0 and 1, got {eval_frac!r}.")
        if not 0 <= eval_frac < 1:
            raise DatasetError(
                f"eval_frac={eval_frac} is outside [0, 1); use e.g. 0.05 to hold out 5% of the rows, "
                f"or 0 to hold out none."
            )
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise DatasetError(f"seed must be a whole number >= 0, got {seed!r}.")
        return dataclasses.replace(self, eval_frac=float(eval_frac), seed=seed, split_set=True)

    # -- rendering -----------------------------------------------------------------------
    def _require_mapping(self) -> Mapping:
        if self.mapping is None:
            raise DatasetError(
                f"{self.label} is not mapped yet. Say which columns hold what, e.g. "
                f".map(prompt={self.columns[0]!r}, response={self.columns[-1]!r}). "
                f"Columns: {', '.join(repr(c) for c in self.columns)}."
            )
        return self.mapping

    def rendered(self) -> Rendered:
        """Every row through the mapping, with what was dropped and why (no warnings)."""
        return render(self.frame, self._require_mapping(), self.label)

    def records(self) -> list[dict[str, Any]]:
        """The rows in training format; unusable rows are dropped with a `DatasetWarning`."""
        mapping = self._require_mapping()
        out = render(self.frame, mapping, self.label)
        reasons = drop_summary(out, mapping)
        if not out.records:
            raise DatasetError(
                f"{self.label}: none of the {len(self.frame)} rows is usable ("
                + "; ".join(reasons)
                + "). Check the mapping, or fill in those cells."
            )
        if reasons:
            dropped = len(self.frame) - len(out.records)
            warnings.warn(
                f"{self.label}: dropped {dropped} of {len(self.frame)} rows ("
                + "; ".join(reasons)
                + "; rows count from 1, header not counted). Fill in or remove them to silence this.",
                DatasetWarning,
                stacklevel=2,
            )
        return out.records

    def held_out_count(self, n: int) -> int:
        """How many of `n` usable records the split holds out."""
        if self.eval_frac == 0 or (not self.split_set and n < MIN_ROWS_FOR_DEFAULT_SPLIT):
            return 0
        if n < 2:
            raise DatasetError(
                f"{self.label} has {n} usable row; holding out rows needs at least 2. "
                f"Add rows, or call .split(eval_frac=0) to train on everything."
            )
        return min(n - 1, max(1, round(n * self.eval_frac)))

    def split_records(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(train, eval) records; which rows are held out depends only on the rows and the seed."""
        records = self.records()
        order = list(range(len(records)))
        random.Random(self.seed).shuffle(order)
        held = set(order[: self.held_out_count(len(records))])
        train = [r for i, r in enumerate(records) if i not in held]
        return train, [r for i, r in enumerate(records) if i in held]

    def preview(self, n: int = 3) -> list[list[dict[str, str]]]:
        """The first `n` records as message lists; also printed."""
        messages = preview_messages(self.records()[: max(0, n)])
        print(format_preview(messages, f"{self.name}: {len(messages)} of {len(self)} rows"))
        return messages

    def report(self, tokenizer: Any = None, max_seq_len: int = 1024) -> DataReport:
        """A `DataReport`: rows, empty cells, duplicates, lengths, rows over `max_seq_len`.

        `tokenizer`: a model folder, a tokenizer.json, or a `tokenizers.Tokenizer`; None
        estimates tokens as characters / 4.
        """
        return build_report(self, tokenizer=tokenizer, max_seq_len=max_seq_len)

    # -- description ---------------------------------------------------------------------
    def spec(self) -> dict[str, Any]:
        """JSON-ready description from which `dataset_code()` rebuilds this dataset."""
        return {
            "source": self.source,
            "format": self.format,
            "name": self.name,
            "mapping": self.mapping.to_dict() if self.mapping else None,
            "eval_frac": self.eval_frac,
            "seed": self.seed,
            "split_set": self.split_set,
            "max_bytes": self.max_bytes,
            **({"hub_split": self.hub_split} if self.hub_split else {}),
            "n_rows": len(self.frame),
        }

    def __repr__(self) -> str:
        cols = ", ".join(self.columns[:8]) + (", ..." if len(self.columns) > 8 else "")
        lines = [
            f"Dataset {self.name!r} ({self.format or 'in memory'}, {len(self)} rows)",
            f"  columns: {cols}",
        ]
        if self.mapping is None:
            lines.append("  mapping: none yet (use .map, .map_pairs or .map_prompts)")
        else:
            slots = "  ".join(f"{k}={v!r}" for k, v in self.mapping.slots().items())
            lines.append(f"  mapping: {self.mapping.kind}  {slots}".rstrip())
        how = "" if self.split_set else f" (default; none under {MIN_ROWS_FOR_DEFAULT_SPLIT} rows)"
        lines.append(f"  split:   {self.eval_frac:.0%} held out, seed {self.seed}{how}")
        return "\n".join(lines)


def _in_memory(x: Any, name: str | None, split: str | None) -> Dataset:
    """A pandas DataFrame, or a datasets.Dataset / one split of a DatasetDict."""
    if isinstance(x, pd.DataFrame):
        label = f"the DataFrame{f' {name!r}' if name else ''}"
        return Dataset(normalise_frame(x, label), name=name or "dataframe", format="dataframe")
    frame, default = hf_frame(x, split)
    label = f"the Dataset {name or default!r}"
    return Dataset(normalise_frame(frame, label), name=name or default, format="datasets")


def dataset(
    x: Any,
    format: str | None = None,
    name: str | None = None,
    max_bytes: int | None = None,
    split: str | None = None,
) -> Dataset:
    """Read a CSV, TSV, JSON, JSONL, Parquet or .xlsx file, wrap a pandas DataFrame or a
    `datasets.Dataset` / `DatasetDict` (`split=` picks one), or fetch a Hub dataset by id
    ("owner/name", `split=` default "train", through `datasets.load_dataset`)."""
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise DatasetError(f"name must be a non-empty string, got {name!r}.")
    if split is not None and not (is_hf_dataset(x) or is_hub_id(x)):
        raise DatasetError(
            "split= is for a datasets.DatasetDict or a Hub dataset id; a file or DataFrame is "
            "one table: drop split= (held-out rows come from .split(eval_frac=...))."
        )
    if isinstance(x, pd.DataFrame) or is_hf_dataset(x):
        if format is not None:
            raise DatasetError("format= is for files; a table in memory is read as it is: drop it.")
        return _in_memory(x, name, split)
    if is_hub_id(x) and format in (None, HUB_FORMAT):
        frame = normalise_frame(hub_frame(x, split), f"the Hub dataset {x!r}")
        return Dataset(frame, name=name or x.rsplit("/", 1)[-1], source=x, format=HUB_FORMAT,
                       hub_split=split or DEFAULT_SPLIT)  # fmt: skip
    if not isinstance(x, str | os.PathLike):
        hint = (
            " For a list of conversations use dragon.conversations()."
            if isinstance(x, list)
            else ""
        )
        raise DatasetError(
            "dataset() takes a file path, a pandas DataFrame, a datasets.Dataset or DatasetDict, "
            f"or a Hub dataset id, got {type(x).__name__}.{hint}"
        )
    frame, path, fmt = read_file(x, format=format, max_bytes=max_bytes)
    return Dataset(frame, name=name or path.stem, source=str(path), format=fmt, max_bytes=max_bytes)
