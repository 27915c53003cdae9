"""The one error type of rewards, shared by validation (at creation) and scoring (in training)."""

from __future__ import annotations


class RewardError(ValueError):
    """A reward is misconfigured, or failed too often while training.

    `traceback` holds the first failure's formatted traceback when scoring raised it.
    """

    def __init__(self, message: str, traceback: str | None = None) -> None:
        super().__init__(message)
        self.traceback = traceback


class RewardTimeout(RewardError):
    """A reward ran past its time limit on one completion (a regex that backtracks without end)."""
