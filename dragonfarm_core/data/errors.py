"""The two ways the data layer complains: `DatasetError` refuses, `DatasetWarning` informs.

Every message names the file (or the in-memory source), the row or line, and the column or
field concerned, says what is wrong and what to do about it.
"""

from __future__ import annotations


class DatasetError(ValueError):
    """The data cannot be used as given. Nothing was written anywhere."""


class DatasetWarning(UserWarning):
    """Something was dropped or adjusted, but the data is still usable."""
