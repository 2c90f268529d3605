"""``launch_bound``: many short kernels with the device idle while the host launches.

Measured as the breakdown's ``host_busy`` reason (device idle, host running Python, ops or
runtime calls) in steps whose kernels are short, less what single runtime calls hold
(:mod:`~explorer.analysis.detectors.runtime_stall`'s finding): reported only when the median kernel is
under :data:`SHORT_KERNEL_NS` and the idle time is at least :data:`MIN_LAUNCH_SHARE` of the
steps — a few µs between kernels is normal and is not a finding.
"""

from __future__ import annotations

import numpy as np

from explorer.analysis.detectors import runtime_stall
from explorer.analysis.detectors.context import Context, Measured
from explorer.analysis.finding import Finding
from explorer.units import fmt_ns

#: What this detector reports and the breakdown reasons it reads (checked by the registry).
KIND = "launch_bound"
REASONS: tuple[str, ...] = ("host_busy",)

SHORT_KERNEL_NS = 50_000
#: From this many kernels per step the title speaks of launch overhead; below, of host work.
MANY_KERNELS = 20
MIN_LAUNCH_SHARE = 0.05


def detect(ctx: Context) -> list[Finding]:
    if not ctx.device_mode:
        return []
    m = ctx.measure("host_busy")
    # A single runtime call holding the device idle is a runtime stall, not launching.
    stalls, stalled = runtime_stall.stall_calls(ctx)
    if m is not None and stalled is not None and stalled.device == m.device:
        m = Measured(
            m.device, m.reason, m.per_step - stalled.per_step, _minus(m.ranges, stalled.ranges),
            m.reasons,
        )  # fmt: skip
    if m is None or m.total < MIN_LAUNCH_SHARE * ctx.total_ns or not ctx.significant(m):
        return []
    kern = ctx.trace.kind_in("kernel", "collective") & ctx.on_device
    k = np.flatnonzero(kern & ctx.starts_in_steps)
    if len(k) == 0:
        return []
    kdur = ctx.end[k] - ctx.ts[k]
    median = float(np.median(kdur))
    if median >= SHORT_KERNEL_NS:
        return []
    launches = ctx.trace.kind_in("runtime", "cpu_op") & ~ctx.on_device
    launches[stalls] = False
    per_step = len(k) / max(len(ctx.steps), 1)
    if per_step >= MANY_KERNELS:
        title = f"Launch-bound: {per_step:.0f} short kernels per step (median {fmt_ns(median)})"
    else:  # few kernels: the host's own work, not launching, leaves the device idle
        title = f"Host-bound: the device idles {100 * ctx.share(m.total):.0f}% of the step waiting for the host"
    explanation = (
        f"The kernels are short (median {fmt_ns(median)}) and {m.device} idles for {fmt_ns(m.total)} "
        "between them while the host runs Python and launches the next one: the host, not the "
        "device, sets the pace."
    )
    graphs = {
        "cuda": "capture the step with CUDA graphs (torch.cuda.graphs / mode='reduce-overhead'), ",
        "rocm": "capture the step with HIP graphs (torch.cuda.graphs / mode='reduce-overhead'), ",
    }.get(m.device.partition(":")[0], "")
    recommendation = (
        "Cut per-kernel host overhead: torch.compile the model (fuses small ops), "
        f"{graphs}use fused optimizers (foreach/fused=True) and larger batches."
    )
    return [
        ctx.finding(
            KIND, m, launches, title, explanation, recommendation,
            details={"kernels": int(len(k)), "median_kernel_ns": median},
        )
    ]  # fmt: skip


def _minus(r: np.ndarray, cut: np.ndarray) -> np.ndarray:
    """The time of sorted disjoint ranges ``r`` outside the sorted disjoint ranges ``cut``."""
    if len(cut) == 0 or len(r) == 0:
        return r
    bounds = np.unique(np.r_[r.ravel(), cut.ravel()])
    mid = (bounds[:-1] + bounds[1:]) // 2
    in_r = np.searchsorted(r[:, 0], mid, side="right") - 1
    keep = (in_r >= 0) & (mid < r[np.maximum(in_r, 0), 1])
    in_c = np.searchsorted(cut[:, 0], mid, side="right") - 1
    keep &= ~((in_c >= 0) & (mid < cut[np.maximum(in_c, 0), 1]))
    lo, hi = bounds[:-1][keep], bounds[1:][keep]
    if len(lo) == 0:
        return np.zeros((0, 2), np.int64)
    join = np.r_[False, lo[1:] == hi[:-1]]
    starts = lo[~join]
    ends = hi[np.r_[np.flatnonzero(~join)[1:] - 1, len(hi) - 1]]
    return np.stack([starts, ends], axis=1).astype(np.int64)
