"""What the export steps' job handles share (`export.MergeJob`, `gguf.GGUFJob`,
`export_jobs.ExportJob`): `state`, `logs()`, `cancel()`, how `wait()` turns a job that did not
produce its output into the step's error, and the foreground form that stops a job when it
takes too long. Each handle keeps its own fields and its own wording. Pure standard library.
"""

from __future__ import annotations

import math
from typing import Any, Protocol, Self, TypeVar

from dragonfarm_core.rundir import jobs

CANCEL_TIMEOUT_S = 10.0

T = TypeVar("T", covariant=True)


class JobHandle:
    """`state`, `logs()` and `cancel()` of a handle whose job is its `job` field."""

    job: jobs.Job

    @property
    def state(self) -> str | None:
        return self.job.status().get("state")

    def logs(self, n: int = 20) -> list[str]:
        return self.job.logs(n)

    def cancel(self, timeout: float = CANCEL_TIMEOUT_S) -> Self:
        self.job.cancel(timeout)
        return self


def wait_status(job: jobs.Job, timeout: float | None) -> dict[str, Any]:
    """The job's status once it has ended; TimeoutError after `timeout` s (None or inf: no
    limit), and the job keeps going."""
    return job.wait(None if timeout is None or math.isinf(timeout) else timeout)


def ended_without(
    job: jobs.Job,
    status: dict[str, Any],
    error: type[Exception],
    *,
    doing: str,
    cancelled: str,
    missing: str,
) -> Exception:
    """The error for a job that ended without its output: `cancelled` or `missing` (it
    succeeded but the output is not there), else "`doing` <how it failed>"; the log's tail
    appended."""
    state = status.get("state")
    if state == "cancelled":
        message = cancelled
    elif state == "succeeded":
        message = missing
    else:
        message = f"{doing} {jobs.failure(status)}"
    return error(jobs.with_log_tail(message, status, job))


class Waitable(Protocol[T]):
    def wait(self, timeout: float | None = None) -> T: ...

    def cancel(self, timeout: float = CANCEL_TIMEOUT_S) -> Any: ...

    def logs(self, n: int = 20) -> list[str]: ...


def wait_or_stop(pending: Waitable[T], timeout: float, subject: str) -> T:
    """`pending.wait(timeout)`, but a job that takes longer is stopped (TimeoutError naming
    `subject` and the log's last lines), and so is one whose wait is interrupted."""
    try:
        return pending.wait(timeout)
    except TimeoutError:
        pending.cancel(timeout=0)
        raise TimeoutError(
            f"{subject} took longer than {timeout:g} s and was stopped; pass a longer timeout=."
            "\nLast lines of the log:\n" + "\n".join(pending.logs(20))
        ) from None
    except KeyboardInterrupt:  # leave no job behind
        pending.cancel(timeout=0)
        raise
