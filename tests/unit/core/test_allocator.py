"""Large blocks go back to the system when freed (``app.core.allocator``), checked on the C
allocator itself in a fresh process: freed blocks left between live small ones are given
back only when each was a mapping of its own."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.e2e.conftest import ROOT

# Frees a 4 MiB block (glibc then raises its threshold to 4 MiB), then makes 40 blocks of
# 1 MiB, each followed by a live block of 256 KiB (untouched: a page of it is resident) so
# that no freed space is at the heap's top, frees the 1 MiB blocks and prints how much RSS
# they left behind, in MiB.
PROGRAM = """
import ctypes, ctypes.util, sys
if sys.argv[1] == "fixed":
    from app.core.allocator import give_back_large_blocks
    assert give_back_large_blocks()
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
libc.free(libc.malloc(4 << 20))
before = rss_mib()
big, small = [], []
for _ in range(40):
    block = libc.malloc(1 << 20)
    libc.memset(block, 1, 1 << 20)
    big.append(block)
    small.append(libc.malloc(256 << 10))  # from the heap's top too (under 4 MiB)
for block in big:
    libc.free(block)
print(round(rss_mib() - before))
"""


def _left_behind(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, mode],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return int(done.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_freed_large_blocks_are_given_back_with_a_fixed_threshold() -> None:
    assert _left_behind("dynamic") >= 30  # glibc's default keeps them resident
    assert _left_behind("fixed") <= 5
