"""``runtime_stall``: one runtime call holds the device idle — the runtime initialising.

The first call into a device runtime pays for what the process has not set up yet: the
context (``cudaDeviceGetStreamPriorityRange``, ``cudaFree(0)`` or whatever call comes
first), loading the kernels' modules (a first ``cudaLaunchKernel``/``hipLaunchKernel``),
library handles (cuDNN, cuBLAS), the caching allocator's first reservations
(``cudaMalloc``). While it runs nothing runs on the device. Measured as the breakdown's
``host_busy`` reason (device idle, host busy) inside single outermost runtime calls: a call
is a stall when that time reaches :data:`~explorer.analysis.detectors.context.MIN_SHARE`
of the step time by itself. The time lost is the union of those calls' device-idle time.

Many short launches are the launch-bound detector's; it leaves out what this one reports
(:func:`stall_calls`), so the same time is not two findings.
"""

from __future__ import annotations

import numpy as np

from explorer.analysis.detectors.context import MIN_SHARE, Context, Measured, torch_module
from explorer.analysis.finding import Finding
from explorer.units import fmt_ns

#: What this detector reports and the breakdown reasons it reads (checked by the registry).
KIND = "runtime_stall"
REASONS: tuple[str, ...] = ("host_busy",)
#: Calls a finding names in its explanation.
NAMED = 3


def stall_calls(ctx: Context) -> tuple[np.ndarray, Measured | None]:
    """The runtime calls that each hold the device idle for at least ``MIN_SHARE`` of the
    step time (slice ids, heaviest first) and that time as a measure: per step, and the
    device-idle ranges inside the calls. Computed once per context (this detector and the
    launch-bound one both read it); callers must not modify what it returns."""
    got: tuple[np.ndarray, Measured | None] = ctx.once(KIND, lambda: _stall_calls(ctx))
    return got


def _stall_calls(ctx: Context) -> tuple[np.ndarray, Measured | None]:
    empty = np.empty(0, np.int64)
    if not ctx.device_mode or ctx.total_ns <= 0:
        return empty, None
    m = ctx.measure("host_busy")
    if m is None or m.total == 0:
        return empty, None
    calls = np.flatnonzero(ctx.outermost(ctx.trace.kind_in("runtime") & ~ctx.on_device))
    if len(calls) == 0:
        return empty, None
    idle = ctx.overlap(m, calls)
    hit = idle >= MIN_SHARE * ctx.total_ns
    calls, idle = calls[hit], idle[hit]
    if len(calls) == 0:
        return empty, None
    calls = calls[np.argsort(-idle, kind="stable")]
    # The device-idle ranges inside the calls (their union: calls on two threads may overlap).
    a, b = ctx.ts[calls], ctx.end[calls]
    r = m.ranges
    inside = [
        np.stack([np.maximum(r[k, 0], lo), np.minimum(r[k, 1], hi)], axis=1)
        for lo, hi in zip(a, b, strict=True)
        for k in [np.flatnonzero((r[:, 1] > lo) & (r[:, 0] < hi))]
    ]
    ranges = _union(np.concatenate(inside) if inside else np.zeros((0, 2), np.int64))
    per_step = np.array(
        [
            int(np.maximum(np.minimum(ranges[:, 1], e) - np.maximum(ranges[:, 0], s), 0).sum())
            for s, e in zip(ctx.steps["start_ns"], ctx.steps["end_ns"], strict=True)
        ],
        np.int64,
    )
    return calls, Measured(m.device, m.reason, per_step, ranges, m.reasons)


def _union(r: np.ndarray) -> np.ndarray:
    """Disjoint sorted ``(start, end)`` rows covering the same time as ``r``."""
    if len(r) == 0:
        return r.astype(np.int64)
    r = r[np.argsort(r[:, 0], kind="stable")]
    reach = np.maximum.accumulate(r[:, 1])
    new = np.r_[True, r[1:, 0] > reach[:-1]]
    starts = r[new, 0]
    ends = reach[np.r_[np.flatnonzero(new)[1:] - 1, len(r) - 1]]
    return np.stack([starts, ends], axis=1).astype(np.int64)


def detect(ctx: Context) -> list[Finding]:
    calls, m = stall_calls(ctx)
    if m is None or not ctx.significant(m):
        return []
    names = ctx.trace.slices["name"].array
    dur = ctx.end[calls] - ctx.ts[calls]
    first = str(names[calls[0]])
    share = 100 * ctx.share(m.total)
    if len(calls) == 1:
        title = (
            f"Runtime stall: one {first} call holds {m.device} idle for {fmt_ns(m.total)} "
            f"({share:.0f}% of the step time)"
        )
    else:
        title = (
            f"Runtime stall: {len(calls)} runtime calls hold {m.device} idle for "
            f"{fmt_ns(m.total)} ({share:.0f}% of the step time), the longest {first}"
        )
    listed = ", ".join(
        f"{names[i]} {fmt_ns(int(d))} (slice {int(i)})"
        for i, d in zip(calls[:NAMED], dur[:NAMED], strict=True)
    )
    more = f" and {len(calls) - NAMED} more" if len(calls) > NAMED else ""
    steps_hit = int((m.per_step > 0).sum())
    explanation = (
        f"While {listed}{more} ran, nothing ran on {m.device}: the runtime setting itself up "
        "(creating the context, loading kernel modules, library handles, the allocator's "
        "first reservations), not the model's work; it is paid once per process"
        + (
            "."
            if steps_hit <= 1
            else f" — yet it appears in {steps_hit} steps, so it recurs: memory is released "
            "and reserved again, or new kernels keep being loaded."
        )
    )
    api = torch_module(m.device) or "torch.cuda"
    recommendation = (
        "Warm up before profiling: run a few iterations (or one forward/backward on a real "
        "batch) before the profiler records, e.g. torch.profiler.schedule(wait=1, warmup=1, "
        f"active=3), and call {api}.synchronize() before the first profiled step, so first-"
        "call costs stay out of the measured steps. If it recurs in every step, keep the "
        f"allocator from giving memory back (no {api}.empty_cache() in the loop; "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) and keep shapes static so no "
        "new kernels are loaded."
    )
    f = ctx.finding(
        KIND, m, calls, title, explanation, recommendation,
        details={
            "calls": [
                {"slice": int(i), "name": str(names[i]), "dur_ns": int(d)}
                for i, d in zip(calls, dur, strict=True)
            ],
        },
    )  # fmt: skip
    return [f]
