"""Setting torch's thread count in a trainer, to what `rundir/threads.py` chose (the one piece
of it that needs torch)."""

from __future__ import annotations

from dragonfarm_core.rundir.threads import choose_threads, usable_cores


def apply() -> str:
    """Set torch's thread count; returns the line the trainer logs. torch is imported here, after
    `threads.before_torch()` set OpenMP's wait policy."""
    import torch

    chosen = choose_threads()
    if chosen is None:
        return f"torch threads: {torch.get_num_threads()} (OMP_NUM_THREADS)"
    torch.set_num_threads(chosen)
    return (
        f"torch threads: {chosen} of {usable_cores()} cores (the others were busy)"
        if (chosen < usable_cores())
        else f"torch threads: {chosen}"
    )
