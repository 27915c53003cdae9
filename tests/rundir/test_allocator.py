"""A trainer process keeps freed memory (rundir/allocator.py): glibc's thresholds are raised,
as mallinfo2 and a freed block's reuse show, in a child process so this one is left alone."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import ctypes, ctypes.util
from dragonfarm_core.rundir import allocator

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
        "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]

def mapped_and_heap(size):
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    during = libc.mallinfo2()
    libc.free(block)
    after = libc.mallinfo2()
    return during.hblkhd, after.arena

size = 256 << 20
before = mapped_and_heap(size)
assert allocator.keep_freed_memory()
kept = mapped_and_heap(size)
print(before[0] >= size, kept[0] < size, kept[1] >= size)
"""


def test_a_large_block_comes_from_the_heap_and_stays_there():
    """Before: a 256 MiB block is mapped on its own (and unmapped on free). After: it comes
    from the heap, which keeps it once freed (the next step's tensors reuse its pages)."""
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True"]


def test_the_fast_allocator_is_added_to_ld_preload_once_and_system_turns_it_off(monkeypatch):
    from dragonfarm_core.rundir import allocator

    monkeypatch.delenv(allocator.ALLOCATOR_ENV, raising=False)
    library = allocator.fast_allocator()
    assert library, (
        "no tcmalloc or jemalloc here: install libtcmalloc-minimal4 (scripts/test.sh does)"
    )
    env = allocator.with_fast_allocator({"LD_PRELOAD": "libother.so", "X": "1"})
    assert env == {"LD_PRELOAD": f"libother.so {library}", "X": "1"}
    assert allocator.with_fast_allocator(env) == env
    monkeypatch.setenv(allocator.ALLOCATOR_ENV, "system")
    assert allocator.fast_allocator() is None
    assert allocator.with_fast_allocator({"X": "1"}) == {"X": "1"}
