"""The one error type of rewards, shared by validation (at creation) and scoring (in training)."""

from __future__ import annotations


class RewardError(ValueError):
    """A reward is misconfigured, or failed too often while training.

    `traceback` holds the first failure's formatted traceback when scoring raised it.
    """

    def __init__(self, message: str, traceback: str | None = None) -> None:
        super().__init__(message)
        self.traceback = traceback
