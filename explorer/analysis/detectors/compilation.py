"""``compile``: time the device waits while dynamo/inductor compile, plus graph breaks and
recompilations with their reasons and lines.

Measured as the breakdown's ``host_compile`` reason. The collector's ``explorer_compile``
events carry ``event`` (``compile``/``graph_break``/``recompile``) and ``reason``; their
counts and reasons go into ``details``. A trace with graph breaks or recompilations gets
this finding even when the compile time itself is small, because each break splits the
graph for every later step.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from explorer.analysis.breakdown import COMPILE_NAMES, name_flags
from explorer.analysis.detectors.context import MAX_EVIDENCE, Context, Measured
from explorer.analysis.finding import Finding
from explorer.units import fmt_ns

#: What this detector reports and the breakdown reasons it reads (checked by the registry).
KIND = "compile"
REASONS: tuple[str, ...] = ("host_compile",)


def detect(ctx: Context) -> list[Finding]:
    m = ctx.measure("host_compile")
    comp = ((ctx.kind == "compile") | name_flags(ctx.trace, COMPILE_NAMES)) & ~ctx.on_device
    ids = np.flatnonzero(ctx.kind == "compile")
    events: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for i in ids[:5000]:  # collector compile events are few (one per compile/break)
        a = ctx.trace.args(int(i))
        events[str(a.get("event", "compile"))] += 1
        if a.get("reason"):
            reasons[str(a["reason"])] += 1
    breaks = events.get("graph_break", 0) + events.get("recompile", 0)
    if not ctx.significant(m) and breaks == 0:
        return []
    if m is None:
        m = Measured(next(iter(ctx.timelines)), "host_compile", np.zeros(len(ctx.steps), np.int64),
                     np.zeros((0, 2), np.int64))  # fmt: skip
    parts = []
    if events.get("graph_break"):
        parts.append(f"{events['graph_break']} graph break(s)")
    if events.get("recompile"):
        parts.append(f"{events['recompile']} recompilation(s)")
    title = f"Compilation: {fmt_ns(m.total)} compiling" + (f", {', '.join(parts)}" if parts else "")
    top_reasons = [r for r, _ in reasons.most_common(5)]
    who = (
        f"{m.device} idles for {fmt_ns(m.total)}"
        if ctx.device_mode
        else f"The host spends {fmt_ns(m.total)}"
    )
    explanation = f"{who} while torch.compile traces and compiles on the host." + (
        " Reasons: " + "; ".join(top_reasons) + "." if top_reasons else ""
    )
    recommendation = (
        "Warm up before measuring (compile once, outside the timed steps); fix graph breaks "
        "(torch._dynamo.explain, TORCH_LOGS=graph_breaks); avoid recompiles by marking dynamic "
        "dimensions (torch._dynamo.mark_dynamic / dynamic=True) and keeping Python scalars out "
        "of guarded inputs."
    )
    f = ctx.finding(
        KIND, m, comp, title, explanation, recommendation,
        details={"events": dict(events), "reasons": dict(reasons.most_common(10))},
    )  # fmt: skip
    if not f.evidence:
        f.evidence = [int(i) for i in np.flatnonzero(comp)[:MAX_EVIDENCE]]
        from explorer.analysis.attribution import top_lines

        f.source_lines = top_lines(ctx.trace, np.flatnonzero(comp))
    return [f]
