"""The C allocator of a trainer process: a better one where the machine has it, and glibc's kept
from handing freed memory back to the kernel where DPO and GRPO gain by it.

`reexec_with_fast_allocator` (the trainer entry's first step, before torch loads) runs the
process again with gperftools' tcmalloc or jemalloc preloaded (LD_PRELOAD) when the system has
one (Debian/Ubuntu packages libtcmalloc-minimal4, libjemalloc2; DRAGONFARM_ALLOCATOR=system
keeps glibc's). glibc's heap keeps the holes that a forward pass leaves between the tensors it
saves for the backward: on the SmolLM2-135M shape (LoRA SFT, batch 4 x 250 tokens) 1.34 GiB
were in use at the end of a forward and 0.9 GiB more sat free in the heap, counted in the
process's RSS. Same steps, same process (6 micro-batches, 2-core VM): peak RSS 2,799 MiB with
glibc, 1,846 with tcmalloc (steps 2.7-3.3 s against 3.1-4.1), 1,892 with jemalloc (2.9-4.3 s).
Handing the holes back instead (glibc's mmap threshold at 256 KiB) gave 1,796 MiB at 9 s a step:
every step faulted its pages in again.

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
allocator as it is. Where the C library is not glibc (macOS, Windows, musl) nothing changes,
nor on tcmalloc or jemalloc (glibc's malloc then serves nothing; those keep freed memory anyway:
bench/dpo_throughput.py's and grpo_throughput.py's ours arms ran as fast on tcmalloc).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from pathlib import Path

# Tried in this order (ctypes.util.find_library names): gperftools' tcmalloc (its build without
# the heap profiler first), measured a little faster than jemalloc above, then jemalloc.
FAST_ALLOCATORS = ("tcmalloc_minimal", "tcmalloc", "jemalloc")
ALLOCATOR_ENV = "DRAGONFARM_ALLOCATOR"  # "system": leave malloc as it is

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


def fast_allocator() -> str | None:
    """The library file of the first FAST_ALLOCATORS this machine has, as LD_PRELOAD takes it;
    None on a system without one, off Linux, or with DRAGONFARM_ALLOCATOR=system."""
    if not sys.platform.startswith("linux") or os.environ.get(ALLOCATOR_ENV) == "system":
        return None
    return _installed_fast_allocator()


@functools.cache
def _installed_fast_allocator() -> str | None:
    # find_library runs `ldconfig -p`; the preflight estimate asks at every settings change
    for name in FAST_ALLOCATORS:
        if found := ctypes.util.find_library(name):
            return found
    return None


def with_fast_allocator(env: dict[str, str]) -> dict[str, str]:
    """`env` with the fast allocator added to LD_PRELOAD (unchanged where there is none)."""
    library = fast_allocator()
    preload = env.get("LD_PRELOAD", "").split()
    if library is None or library in preload:
        return env
    return {**env, "LD_PRELOAD": " ".join([*preload, library])}


def reexec_with_fast_allocator() -> None:
    """Run this process's command again with the fast allocator preloaded (same pid, same
    open files); returns where there is nothing to do or the exec failed. Call it before
    anything is started that the exec would throw away."""
    env = with_fast_allocator(dict(os.environ))
    if env.get("LD_PRELOAD") == os.environ.get("LD_PRELOAD"):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    except OSError as exc:
        print(f"[dragonfarm] could not restart with {env['LD_PRELOAD']}: {exc}", flush=True)


def allocator_in_use() -> str:
    """Which malloc this process runs on, in words (its memory map names a preloaded one)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "the system's"
    for name in FAST_ALLOCATORS:
        if f"/lib{name}.so" in maps:
            return name
    return "the system's"
