"""How many threads torch trains on: the cores this process may use that no other process is
busy on, and threads that sleep rather than spin while they wait for each other. (The worker's
chat decode asks the same question at every reply: `OtherLoad`.) Torch-free: the trainer sets the
count it chose (`trainers/torch_threads.py`).

On a machine that is busy with something else (another training, tests, a browser), torch's
default (one thread per core, OpenMP threads spinning at every barrier) is a disaster: measured
on the 2-core CPU with the bundled model, 4.2 s a step on 2 threads against 0.9 s on 1 while
another job held a core (and session 1 measured 20x slower). So, before torch is imported,
OMP_WAIT_POLICY=PASSIVE (waiting threads sleep: 2 threads then took 0.92-1.05 s under the same
load), and after the queue gave the run its turn, as many threads as there are cores in this
process's affinity mask that were idle over a short sample (at least 1). An OMP_NUM_THREADS or
OMP_WAIT_POLICY the user set wins. bench/threads_under_load.py measures both against torch's
defaults with other processes busy.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import MutableMapping

import psutil

SAMPLE_S = 0.5


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask; all of them where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no affinity masks
        return os.cpu_count() or 1


def idle_cores(cores: int, sample_s: float = SAMPLE_S) -> float:
    """How many of `cores` no process used over `sample_s` seconds (this one sleeps meanwhile)."""
    busy = psutil.cpu_percent(interval=sample_s) / 100 * (psutil.cpu_count() or cores)
    return max(0.0, cores - busy)


class OtherLoad:
    """How many cores other processes keep busy, sampled every `every_s` seconds by a daemon
    thread: all cores' use less this process's own, so that a decode in progress does not
    count against itself. For a decode that starts at any moment, which `idle_cores` would make
    wait a sample. `busy` is 0 until the first sample."""

    def __init__(self, every_s: float = SAMPLE_S) -> None:
        self.every_s = every_s
        self.busy = 0.0
        self.samples = 0
        self.thread: threading.Thread | None = None

    def start(self) -> OtherLoad:
        self.thread = threading.Thread(target=self.watch, name="other-load", daemon=True)
        self.thread.start()
        return self

    def watch(self) -> None:
        me = psutil.Process()
        psutil.cpu_percent(interval=None)  # both count from here
        me.cpu_percent(interval=None)
        while True:
            time.sleep(self.every_s)
            self.sample(me)

    def sample(self, me: psutil.Process) -> None:
        """Update `busy` from the use since the previous sample."""
        everyone = psutil.cpu_percent(interval=None) / 100 * (psutil.cpu_count() or 1)
        self.busy = max(0.0, everyone - me.cpu_percent(interval=None) / 100)
        self.samples += 1

    def free_threads(self, most: int) -> int:
        """Threads to run on, at most `most`: as many as this process's cores that the others
        leave idle, at least 1."""
        return max(1, min(most, round(usable_cores() - self.busy)))


def choose_threads(environ: MutableMapping[str, str] | None = None) -> int | None:
    """The thread count to train on; None when the user set OMP_NUM_THREADS."""
    environ = os.environ if environ is None else environ
    if environ.get("OMP_NUM_THREADS"):
        return None
    cores = usable_cores()
    return max(1, min(cores, round(idle_cores(cores))))


def before_torch(environ: MutableMapping[str, str] | None = None) -> None:
    """Make OpenMP's waiting threads sleep (unless the user chose a policy): call it before
    torch is imported, which is when OpenMP reads it."""
    (os.environ if environ is None else environ).setdefault("OMP_WAIT_POLICY", "PASSIVE")
