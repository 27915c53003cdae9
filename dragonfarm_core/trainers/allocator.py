"""The C allocator of a trainer process: keep freed memory for the next step instead of handing
it back to the kernel.

torch allocates CPU tensors with malloc. glibc gives a block above its mmap threshold (128 KiB,
raised as such blocks are freed, at most 32 MiB) pages of its own and unmaps them on free, and
it trims the top of the heap back to the kernel; the next step's tensors of the same sizes then
fault every page in again, zero-filled. A GRPO step allocates and frees hundreds of megabytes
(rollouts, then logits of the policy and the reference over every completion), so on a CPU it
spent a fifth of its time there: bench/grpo_throughput.py's ours arm (bundled model, 6 steps of
4 prompts x 8 completions, 2-core AVX-512 VM) took 21.3-22.0 s in four runs, 16.6-18.5 s in
five with both thresholds raised (either one alone: 21.1-27.8 s), at 2.6-2.8 GiB peak RSS
against 2.3. DPO (a reference forward pass over every pair as well): bench/dpo_throughput.py's
ours arm 16.8-17.6 s -> 13.8-14.2 s, peak RSS 1.31 -> 1.45-1.56 GiB. SFT (13.0-14.2 against
14.0-14.6 s) and ORPO (9.06-9.16 against 8.58-9.01 s) did not gain, so their trainers leave the
allocator as it is. Where the C library is not glibc (macOS, Windows, musl) nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util

# mallopt's parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# mallopt takes an int: 1 GiB for blocks from the heap, and never trim it.
HEAP_UP_TO = 1 << 30
NEVER_TRIM = 2**31 - 1


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; False where there is no glibc
    or it refused."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return mallopt(M_MMAP_THRESHOLD, HEAP_UP_TO) == 1 and mallopt(M_TRIM_THRESHOLD, NEVER_TRIM) == 1
