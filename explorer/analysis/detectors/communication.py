"""``communication``: collective time not hidden behind compute.

Measured as the breakdown's ``dev_comm`` reason (a collective runs and no kernel does) and
``host_comm`` (the device idle while the host runs a gloo collective itself); on CPU-only
traces ``host_comm`` (gloo/c10d ops on the host).
"""

from __future__ import annotations

import numpy as np

from explorer.analysis.classify import classes
from explorer.analysis.detectors.context import Context
from explorer.analysis.finding import Finding
from explorer.units import fmt_ns, shorten

#: What this detector reports and the breakdown reasons it reads (checked by the registry).
KIND = "communication"
REASONS: tuple[str, ...] = ("dev_comm", "host_comm")


def detect(ctx: Context) -> list[Finding]:
    m = ctx.measure(*REASONS) if ctx.device_mode else ctx.measure("host_comm")
    if not ctx.significant(m):
        return []
    assert m is not None
    cls = classes(ctx.trace)
    coll = cls.blocking_collective | (cls.device_collective if ctx.device_mode else False)
    coll = ctx.outermost(coll)
    names = ctx.trace.slices["name"].array[np.flatnonzero(coll)[:2000]]
    kinds = sorted({shorten(str(n).split("(")[0].strip(), 60) for n in names} - {""})[:5]
    named = f" ({', '.join(kinds)})" if kinds else ""  # never "Collectives () run on host"
    title = f"Exposed communication: {fmt_ns(m.total)} of collectives not overlapped with compute"
    explanation = (
        f"Collectives{named} run on {m.device} for {fmt_ns(m.total)} with no compute "
        "alongside, so every rank waits for the network."
    )
    recommendation = (
        "Overlap communication with compute: DDP bucketing (bucket_cap_mb) and gradient "
        "accumulation with no_sync(), FSDP prefetching (forward_prefetch, backward_prefetch), "
        "fewer/larger collectives; check for stragglers if one rank waits on others."
    )
    return [
        ctx.finding(
            KIND, m, coll, title, explanation, recommendation,
            details={"collectives": int(coll.sum())},
        )
    ]  # fmt: skip
