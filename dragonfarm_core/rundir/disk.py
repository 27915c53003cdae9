"""Telling that a process stopped because the disk was full, from what it left behind.

A trainer that meets a full disk often cannot say so: writing its failed status needs a new
file, and that write fails too. So the reader looks for the signs itself (`full_disk`): the
system's "No space left on device" (errno 28, ENOSPC) in the log's tail, or a disk that still
has next to nothing free. `is_disk_full` classifies an exception the writer did catch.
Pure standard library: the trainer and the app both import it.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

# status.json's `reason` for a process stopped by a full disk.
DISK_FULL = "disk_full"
# Below this much free space the disk counts as full: a checkpoint, even a status write
# (a new file), needs more.
NEARLY_FULL_BYTES = 16 * 2**20
# strerror(ENOSPC) as Python and C libraries print it, and the errno itself.
_NO_SPACE = re.compile(r"No space left on device|\bENOSPC\b|\[Errno 28\]", re.I)


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc` (or what it was raised from) is the system's 'No space left on device'.

    >>> is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    True
    >>> is_disk_full(RuntimeError("CUDA out of memory"))
    False
    """
    seen: BaseException | None = exc
    for _ in range(5):  # an error wrapped by a library (safetensors, torch.save) a few times
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return True
        if _NO_SPACE.search(str(seen)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def full_disk(folder: str | os.PathLike[str], log_tail: Iterable[str]) -> str | None:
    """Why `folder`'s disk counts as full, in a few words, or None: the log's tail says so,
    or the disk has less than NEARLY_FULL_BYTES free now."""
    if any(_NO_SPACE.search(line) for line in log_tail):
        return "No space left on device, says the log"
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return None
    return f"{free / 2**20:.1f} MiB free" if free < NEARLY_FULL_BYTES else None


def last_written(*paths: Path) -> str:
    """The newest modification time among `paths` that exist, as ISO-8601 UTC (now if none):
    when a process that is gone last wrote, the same on every read."""
    times = []
    for path in paths:
        try:
            times.append(path.stat().st_mtime)
        except OSError:
            continue
    when = datetime.fromtimestamp(max(times), UTC) if times else datetime.now(UTC)
    return when.isoformat(timespec="seconds")
