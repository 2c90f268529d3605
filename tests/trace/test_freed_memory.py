"""Freed memory goes back to the system: glibc's heap keeps what is freed, so the viewer
gives it back after each analysis and each panel's job (:func:`release_freed_memory`);
measured in a fresh process, as the resident memory the kernel reports."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

#: Frees a run of 2 MB arrays, each held in place by a small array allocated after it
#: (the heap cannot shrink past those), after one 16 MB block was freed: glibc then
#: serves 2 MB from the heap (it raises the size it maps blocks from to each mapped block
#: freed) and keeps it when freed.
CHILD = r"""
import json, sys
import numpy as np
from explorer.trace.memory_limits import release_freed_memory
def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
big = np.ones(16 << 20, np.uint8); del big
blocks, pins = [], []
for _ in range(100):
    blocks.append(np.ones(2 << 20, np.uint8))
    pins.append(np.ones(200 << 10, np.uint8))
held = resident()
del blocks
if sys.argv[1] == "released":
    release_freed_memory()
print(json.dumps({"freed": held - resident()}))
"""


def _freed(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True
    )
    return int(json.loads(out.stdout)["freed"])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator only")
def test_freed_large_blocks_leave_the_process() -> None:
    blocks = 100 * (2 << 20)
    # Without the release the heap keeps them (0 of the 200 MB here, as the viewer held
    # 420 MB on a 1M-slice trace). Not asserted: once in CI, the child of a pytest worker
    # that had run ~1,200 tests had them all given back unasked (what it inherited that
    # changed glibc's choice was not found; run alone, that tree's child keeps them).
    assert _freed("released") > 0.9 * blocks
