"""All findings of a trace, ranked by the time they cost.

Each detector (:mod:`explorer.analysis.detectors`) measures one pathology on the breakdown's
reason timeline and reports it only when it costs at least
:data:`~explorer.analysis.detectors.context.MIN_SHARE` (2%) of the total step time (the
launch-bound detector asks for 5% and short kernels, an input stall on a CPU-only trace for
10%; memory findings need steady growth): :func:`thresholds` lists them per trace.
A healthy trace therefore has no finding. Ties in time lost keep the order of
:data:`~explorer.analysis.detectors.DETECTORS`.
"""

from __future__ import annotations

from explorer.analysis.breakdown import track_device_labels
from explorer.analysis.detectors import DETECTORS, FINDING_KINDS, Context, input_stall, launch_bound
from explorer.analysis.detectors.context import MIN_SHARE
from explorer.analysis.finding import Finding
from explorer.trace.memo import memoised
from explorer.trace.model import TraceData


def thresholds(trace: TraceData) -> dict[str, float]:
    """Finding kind → the least share of the step time at which its detector reports it on
    this trace (memory findings are about growth, not time, and are not listed).

    The detectors' own constants, so what the report says it looked for is what they did."""
    out = {kind: MIN_SHARE for kind in FINDING_KINDS if kind != "memory"}
    if track_device_labels(trace):
        out["launch_bound"] = max(MIN_SHARE, launch_bound.MIN_LAUNCH_SHARE)
    else:  # CPU-only: no launches to wait for; loading data is the host's work, not idle
        del out["launch_bound"]
        del out["runtime_stall"]  # no device for a runtime call to hold idle
        out["input_stall"] = max(MIN_SHARE, input_stall.HOST_MIN_SHARE)
    return out


def no_finding_sentence(trace: TraceData) -> str:
    """What "no finding" means on this trace, with the thresholds the detectors used."""
    th = thresholds(trace)
    common = min(th.values())
    higher = sorted((v, k) for k, v in th.items() if v > common)
    extra = "; ".join(f"{k.replace('_', ' ')}: ≥ {100 * v:g}%" for v, k in higher)
    return f"No problem found: no pathology costs ≥ {100 * common:g}% of the step time" + (
        f" ({extra})." if extra else "."
    )


def findings(trace: TraceData, kinds: tuple[str, ...] | None = None) -> list[Finding]:
    """Ranked findings (largest ``time_lost_ns`` first), a fresh list over the kept ones."""
    return list(_ranked(trace, kinds))


@memoised(
    "findings",
    depends_on=(
        "steps",
        "breakdown",
        "reason_timelines",
        "slice_sources",
        "memory_allocations",
        "fallback_calls",
        "statement_codes",
    ),
)
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
