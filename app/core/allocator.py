"""The C allocator's settings for svc's server processes.

glibc's malloc serves a request of 128 KiB or more with a mapping of its own, returned to
the system when freed, but it raises that threshold each time such a block is freed (up to
32 MiB), so later blocks of that size come from its heaps and stay resident once freed.
granian's workers allocate such buffers while they serve streams (measured: one worker
grew by 18 MB at ten concurrent fast streams and never gave it back, then held 1,000 slow
streams at 126 MB instead of 110). A fixed threshold keeps every large block a mapping of
its own, given back when freed; the bench measured no difference in CPU.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
LARGE_BLOCK_BYTES = 128 * 1024  # glibc's own starting threshold, kept fixed


def give_back_large_blocks() -> bool:
    """Fix glibc's mmap threshold in this process (and in the processes it forks from now
    on); False where the C library is not glibc (nothing is changed there)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # not glibc (musl has no mallopt)
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK_BYTES))
