"""Data onboarding: read a table or conversations, map columns to training records, check it.

    import dragonfarm_core as dragon
    ds = dragon.dataset(dragon.example_data()).map(prompt="{subject}\\n\\n{body}", response="reply")
    ds.preview(1)
    ds.report()

Modules: `readers` (files to a frame of text), `templates` (column names and {templates}),
`records` (training record shapes), `dataset` (the `Dataset` object), `conversations`,
`report` (`DataReport`), `codegen` (`dataset_code`), `example` (the bundled tickets).
"""

from dragonfarm_core.data.codegen import dataset_code
from dragonfarm_core.data.conversations import conversations
from dragonfarm_core.data.dataset import Dataset, dataset
from dragonfarm_core.data.errors import DatasetError, DatasetWarning
from dragonfarm_core.data.example import HOUSE_STYLE_PATTERN, example_data
from dragonfarm_core.data.records import Mapping
from dragonfarm_core.data.report import DataReport

__all__ = [
    "HOUSE_STYLE_PATTERN",
    "DataReport",
    "Dataset",
    "DatasetError",
    "DatasetWarning",
    "Mapping",
    "conversations",
    "dataset",
    "dataset_code",
    "example_data",
]
