"""Whether the whole-trace analyses can fit in the memory this process may use.

The analyses behind ``explorer report``, ``explorer export`` with its results and the
viewer's panels (steps, breakdown, findings, dependency graph and critical path) hold
arrays over every slice; at their peak, about 1.5 KB of memory per slice (measured:
673k slices, 1.0 GB over the interpreter; 8.4M slices, 12 GB). Under a hard limit — a
container's or scheduler's memory cgroup, which kills the process without a word when it
is reached, or a ``ulimit`` — a trace whose analyses certainly cannot fit is refused at
once, in one line, rather than after minutes of work. The test uses a floor well under
the measured need, so a trace that could fit is never refused.
"""

from __future__ import annotations

from explorer.errors import ExplorerError
from explorer.trace.memory_limits import hard_limit
from explorer.trace.model import TraceData

#: The least memory per slice the analyses take at their peak: half the measured need.
LEAST_BYTES_PER_SLICE = 700


def check_analyses_fit(
    trace: TraceData, what: str, instead: str, bytes_per_slice: int = LEAST_BYTES_PER_SLICE
) -> None:
    """:class:`~explorer.errors.ExplorerError` when ``what`` (e.g. "the report's analyses")
    cannot fit under this process's hard memory limit; ``instead`` says what works."""
    check_fits(
        str(trace.metadata.get("source", "the trace")),
        len(trace.slices),
        bytes_per_slice,
        what,
        instead,
    )


def check_fits(source: str, n: int, bytes_per_slice: int, what: str, instead: str) -> None:
    """:class:`~explorer.errors.ExplorerError` when ``what``, over the ``n`` slices of
    ``source`` and taking at least ``bytes_per_slice`` each at its peak, cannot fit under
    this process's hard memory limit; ``instead`` says what works."""
    limit = hard_limit(certain=True)
    need = bytes_per_slice * n
    if limit is None or need <= limit[0]:
        return
    raise ExplorerError(
        f"{source}: {what} over {n:,} slices need at least {need / 2**30:.1f} GiB at their "
        f"peak, and this process may use {limit[0] / 2**30:.1f} GiB more ({limit[1]}) — "
        f"raise the limit or run on a larger machine; {instead}"
    )
