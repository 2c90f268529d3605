"""``memcpy_stall``: copies the device spends time on that nothing overlaps.

Measured as the breakdown's ``dev_copy`` reason (a memcpy/memset runs and no kernel does)
plus ``copy_refill`` (the device idle right after a blocking pageable copy until the host
launches again); on CPU-only traces ``host_copy`` (the collector's copy events). Copies made
by a CPU fallback are left to the ``cpu_fallback`` finding. Details say how much was
pageable (which makes ``cudaMemcpyAsync`` synchronous), device→host, and small (< 64 KiB,
dominated by per-copy latency).
"""

from __future__ import annotations

import numpy as np

from explorer.analysis.detectors.context import Context
from explorer.analysis.detectors.cpu_fallback import fallback_windows
from explorer.analysis.finding import Finding
from explorer.trace.columns import category_values
from explorer.units import fmt_bytes, fmt_ns

#: What this detector reports and the breakdown reasons it reads (checked by the registry).
KIND = "memcpy_stall"
REASONS: tuple[str, ...] = ("dev_copy", "copy_refill", "host_copy")

SMALL_COPY_BYTES = 64 * 1024


def detect(ctx: Context) -> list[Finding]:
    m = ctx.measure("dev_copy", "copy_refill") if ctx.device_mode else ctx.measure("host_copy")
    if m is None:
        return []
    labelled, pattern = fallback_windows(ctx)
    fb = np.concatenate([labelled, pattern])
    if len(fb):  # a CPU fallback's copies belong to the cpu_fallback finding
        m.per_step = m.per_step - ctx.in_windows(m.device, "dev_copy", fb)
        m.per_step -= ctx.in_windows(m.device, "copy_refill", fb)
    if not ctx.significant(m):
        return []
    s = ctx.trace.slices
    copies = ctx.trace.kind_in("memcpy", "memset", "copy")
    copies &= ctx.on_device if ctx.device_mode else ~ctx.on_device
    for i in fb:  # drop the fallbacks' copies from the evidence too
        copies &= ~((ctx.ts >= ctx.ts[i]) & (ctx.end <= ctx.end[i]))
    ids = np.flatnonzero(copies)
    src_mem = category_values(s["src_mem"])[ids]
    dst_mem = category_values(s["dst_mem"])[ids]
    direction = category_values(s["copy_kind"])[ids]
    nbytes = s["bytes"].to_numpy(np.int64)[ids]
    pageable = (src_mem == "Pageable") | (dst_mem == "Pageable")
    dtoh = direction == "DtoH"
    small = (nbytes >= 0) & (nbytes < SMALL_COPY_BYTES)
    total_bytes = int(np.maximum(nbytes, 0).sum())
    causes = []
    if pageable.any():
        causes.append(f"{int(pageable.sum())} copies from/to pageable host memory (synchronous)")
    if dtoh.any():
        causes.append(f"{int(dtoh.sum())} device→host copies")
    if small.any() and small.sum() >= len(ids) / 2:
        causes.append(f"{int(small.sum())} small copies (< 64 KiB) paying per-copy latency")
    title = f"Copies not overlapped with compute: {fmt_ns(m.total)} on {m.device}"
    moved = f"moved {fmt_bytes(total_bytes)}" if total_bytes else "ran (sizes not recorded)"
    explanation = (
        f"{len(ids)} copies {moved}; for {fmt_ns(m.total)} the device did nothing but copy, or "
        "waited for the host after a blocking copy, with no kernel running alongside."
        + (" Causes: " + "; ".join(causes) + "." if causes else "")
    )
    recommendation = (
        "Pin host memory (DataLoader(pin_memory=True) or tensor.pin_memory()), copy with "
        ".to(device, non_blocking=True) so copies overlap compute, batch small transfers into "
        "one, and keep tensors on the device instead of round-tripping through the host."
    )
    return [
        ctx.finding(
            KIND, m, copies, title, explanation, recommendation,
            details={
                "copies": len(ids), "bytes": total_bytes, "pageable": int(pageable.sum()),
                "dtoh": int(dtoh.sum()), "small": int(small.sum()),
            },
        )
    ]  # fmt: skip
