"""All findings of a trace, ranked by the time they cost.

Each detector (:mod:`explorer.analysis.detectors`) measures one pathology on the breakdown's
reason timeline and reports it only when it costs at least
:data:`~explorer.analysis.detectors.context.MIN_SHARE` (2%) of the total step time (the
launch-bound detector asks for 5% and short kernels; memory findings need steady growth).
A healthy trace therefore has no finding. Ties in time lost keep the order of
:data:`~explorer.analysis.detectors.DETECTORS`.
"""

from __future__ import annotations

from explorer.analysis.detectors import DETECTORS, FINDING_KINDS, Context
from explorer.analysis.finding import Finding
from explorer.trace.memo import memoised
from explorer.trace.model import TraceData


def findings(trace: TraceData, kinds: tuple[str, ...] | None = None) -> list[Finding]:
    """Ranked findings (largest ``time_lost_ns`` first), a fresh list over the kept ones."""
    return list(_ranked(trace, kinds))


@memoised("findings")
def _ranked(trace: TraceData, kinds: tuple[str, ...] | None) -> list[Finding]:
    ctx = Context(trace)
    out: list[Finding] = []
    for detector in DETECTORS:
        if kinds is None or detector.kind in kinds:
            with ctx.reading(detector.reasons):
                out.extend(detector.detect(ctx))
    order = {k: i for i, k in enumerate(FINDING_KINDS)}
    out.sort(key=lambda f: (-f.time_lost_ns, order.get(f.kind, len(order))))
    return out
