"""Whether the whole-trace analyses can fit in the memory this process may use.

The analyses behind ``explorer report``, ``explorer export`` with its results and the
viewer's panels (steps, breakdown, findings, dependency graph and critical path) hold
arrays over every slice; at their peak, about 640 B of memory per slice over the
interpreter (measured 2026-12-07: a first report of 673k slices, 549 MB in its largest
process; a window of a 6.65M-slice trace, ~565 B more for each slice it adds under a 2 GiB
cgroup — it was 1.5 KB before the graph's ids went to int32). Under a hard limit — a
container's or scheduler's memory cgroup, which kills the process without a word when it
is reached, or a ``ulimit`` — a trace whose analyses certainly cannot fit is refused at
once, in one line, rather than after minutes of work. The test uses a floor well under
the measured need, so a trace that could fit is never refused.

Rather than refuse, ``report`` analyses the run of steps that fits (:func:`steps_that_fit`),
sized by the measured need, and says so: a window of the trace is a trace of its own
(:func:`explorer.analysis.steps.window_of_steps`) whose steps' breakdown and critical path
are the whole trace's.
"""

from __future__ import annotations

import numpy as np

from explorer.analysis.critical_path import SCIPY_INIT_BYTES
from explorer.analysis.steps import attributed_steps, window_of_steps
from explorer.errors import ExplorerError, UsageError
from explorer.trace.memory_limits import hard_limit, memory_budget
from explorer.trace.model import TraceData

#: The least memory per slice the analyses take at their peak: about half the measured need.
LEAST_BYTES_PER_SLICE = 350
#: What the analyses took at their peak per slice, with a margin (measured: 565-640 B), for
#: sizing a window that is to fit rather than refusing one that certainly cannot. (A
#: 6.65M-slice trace under a 2 GiB cgroup: a window of 1.07M slices peaked at 1.69 GB.)
MEASURED_BYTES_PER_SLICE = 1_000


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


def steps_that_fit(
    trace: TraceData, bytes_per_slice: int = MEASURED_BYTES_PER_SLICE
) -> tuple[int, int, str] | None:
    """None when the whole trace's analyses fit in what this process may use (by the
    measured need); else ``(first, last, limit)``: the step numbers of the longest run of
    steps, from the first, whose slices' analyses fit, and that limit in words.

    A step's slices are counted by where they start (inside its window, attributed device
    work included): one pass over the start times, never the window cut itself.
    :class:`~explorer.errors.ExplorerError` when not even the first step fits."""
    room, limit = memory_budget()
    room -= SCIPY_INIT_BYTES  # what the critical path's solver takes to start, whatever the size
    n = len(trace.slices)
    if n * bytes_per_slice <= room:
        return None
    att = attributed_steps(trace)
    starts = att["host_start_ns"].to_numpy(np.int64)  # a step's window starts at or after
    k = np.searchsorted(starts, trace.slices["ts"].to_numpy(np.int64), side="right") - 1
    per_step = np.bincount(k[k >= 0], minlength=len(att))[: len(att)]
    fits = np.cumsum(per_step) * bytes_per_slice <= room
    if len(att) == 0 or not fits[0]:
        raise ExplorerError(
            f"{trace.path or 'the trace'}: even its first step's analyses "
            f"({int(per_step[0]) if len(att) else n:,} slices) need more memory than the "
            f"{max(room, 0) / 2**30:.1f} GiB this process may use ({limit}) — raise the limit or run "
            "on a larger machine; info, sql and export --no-results work within it"
        )
    last = int(np.flatnonzero(fits)[-1])
    steps = att["step"].to_numpy(np.int64)
    return int(steps[0]), int(steps[last]), limit


def analysed_window(
    trace: TraceData, step_range: tuple[int, int] | None = None, step: int | None = None
) -> tuple[TraceData, str]:
    """The trace the analyses are to read, and a note for the user ("" when none): the
    steps asked for (``step_range``, both included), else the whole trace when its
    analyses fit in memory, else the run of steps that fits (:func:`steps_that_fit`) —
    just ``step`` when one is given."""
    if step_range is not None:
        first, last = step_range
        if step is not None and not first <= step <= last:
            raise UsageError(f"--step {step} is outside --step-range {first}:{last}")
        return window_of_steps(trace, first, last, f"requested (--step-range {first}:{last})"), ""
    fit = steps_that_fit(trace)
    if fit is None:
        return trace, ""
    first, last, limit = fit
    if step is not None:
        first = last = step
    n = len(trace.slices)
    reason = (
        f"the analyses of all {n:,} slices would need about "
        f"{n * MEASURED_BYTES_PER_SLICE / 2**30:.1f} GiB, more than this process may use "
        f"({limit})"
    )
    window = window_of_steps(trace, first, last, reason)
    assert window.window is not None
    which = f"step {first}" if first == last else f"steps {first}-{last}"
    return window, (
        f"{trace.path or 'the trace'}: {reason}; analysing {which} of "
        f"{window.window.whole_steps} (--step-range FIRST:LAST picks others)"
    )
