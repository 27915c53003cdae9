"""What users of the Hugging Face stack already hold, as a table for `dataset()`: a
`datasets.Dataset`, one split of a `DatasetDict`, or a Hub dataset id read with
`datasets.load_dataset`.

    ds = dragon.dataset(load_dataset("org/name", split="train"))
    ds = dragon.dataset(dataset_dict, split="test")
    ds = dragon.dataset("org/name", split="train")          # fetched from the Hub

`datasets` is imported only when one of these is given: importing it takes seconds, and reading
a file needs none of it. A Hub id is a string that names no file here and looks like
`owner/name` without a data file's extension, so a mistyped file path still gets the file
error.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd

from dragonfarm_core.data.errors import DatasetError
from dragonfarm_core.data.readers import EXTENSIONS

HUB_FORMAT = "hub"
DEFAULT_SPLIT = "train"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


def is_hf_dataset(x: Any) -> bool:
    """A `datasets.Dataset` or `DatasetDict` (told by its class's package, without importing)."""
    return any(c.__module__.split(".")[0] == "datasets" for c in type(x).__mro__[:-1])


def is_hub_id(x: Any) -> bool:
    """`owner/name` naming no file here and with no data file's extension."""
    if not isinstance(x, str) or not _HUB_ID.match(x) or Path(x).exists():
        return False
    return Path(x).suffix.lower() not in EXTENSIONS


def hf_frame(x: Any, split: str | None) -> tuple[pd.DataFrame, str]:
    """(the rows as a DataFrame, a name) of a Dataset, or of `split` of a DatasetDict."""
    if hasattr(x, "to_pandas") and hasattr(x, "column_names"):  # a Dataset
        if split is not None and x.split is not None and str(x.split) != split:
            raise DatasetError(
                f"This Dataset is the {str(x.split)!r} split; split={split!r} does not apply "
                "(drop split=, or pass the DatasetDict it came from)."
            )
        return x.to_pandas(), (x.info.dataset_name or "hf_dataset")
    if isinstance(x, dict) and all(hasattr(v, "to_pandas") for v in x.values()):
        names = ", ".join(map(repr, x))
        if split is None:
            if len(x) != 1:
                raise DatasetError(
                    f"This DatasetDict has the splits {names}: say which with split=, "
                    f"e.g. dragon.dataset(d, split={next(iter(x))!r})."
                )
            split = next(iter(x))
        if split not in x:
            raise DatasetError(f"This DatasetDict has no split {split!r}; it has {names}.")
        return hf_frame(x[split], None)
    raise DatasetError(
        f"dataset() takes a datasets.Dataset or DatasetDict; a {type(x).__name__} is neither "
        "(an IterableDataset: materialise it with Dataset.from_generator or take() first)."
    )


def hub_frame(repo_id: str, split: str | None) -> pd.DataFrame:
    """`split` (default "train") of the Hub dataset `repo_id`, through datasets.load_dataset."""
    import datasets  # seconds to import: only when a Hub id is given

    chosen = split or DEFAULT_SPLIT
    try:
        loaded = datasets.load_dataset(repo_id, split=chosen)
    except Exception as e:  # offline, no such dataset, gated, no such split: all say the same
        reason = " ".join(str(e).split())[:300] or type(e).__name__
        raise DatasetError(
            f"Could not fetch the Hub dataset {repo_id!r} (split {chosen!r}): {reason}. "
            f"(No file {repo_id!r} exists here either.) Check the id and split, and that the Hub can be reached (HF_TOKEN for gated "
            "datasets). Without internet, save it as a file where you have internet "
            f"(datasets.load_dataset({repo_id!r}, split={chosen!r}).to_csv('data.csv')) and "
            "read that: dragon.dataset('data.csv')."
        ) from None
    return loaded.to_pandas()
