"""Which allocator Arrow uses: the system's under an rlimit.

Arrow's default allocator (mimalloc) reserves an arena of 1 GB at its first use — a store
read, or pandas' Arrow-backed strings (``series.astype(str) == "launch"``) — and an
address-space or data-size limit (``ulimit -v``/``-d``) counts all of it, so a process
capped at 2 GB loses half of it to memory nobody uses. The system allocator takes only
what is used. Arrow's compute kernels take the pool fixed when Arrow starts, from
``ARROW_DEFAULT_MEMORY_POOL`` (``pyarrow.set_memory_pool`` does not reach them), so
``explorer`` sets it first of all, before pandas imports Arrow. Only the standard library
here, for that reason.
"""

from __future__ import annotations

import os
import resource
import sys


def rlimited() -> bool:
    """Whether this process runs under an address-space or data-size limit."""
    return any(
        resource.getrlimit(which)[0] != resource.RLIM_INFINITY
        for which in (resource.RLIMIT_AS, resource.RLIMIT_DATA)
    )


def arrow_allocator_for_limits() -> None:
    """Under an rlimit, the system allocator for Arrow (see the module docstring)."""
    if not rlimited():
        return
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    if "pyarrow" in sys.modules:  # imported already (a notebook): what can still change
        import pyarrow as pa

        pa.set_memory_pool(pa.system_memory_pool())
