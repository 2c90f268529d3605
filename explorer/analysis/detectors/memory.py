"""``memory``: allocated memory that grows step after step (a leak suspect).

Reported when, on some device, the memory allocated at the end of each step grows in at
least :data:`MIN_GROWING` consecutive steps by at least :data:`MIN_GROWTH_BYTES` in total
(and 2% of the peak). Steady-state memory, however large, is not a finding: the peak is
shown in the report's memory section instead. ``time_lost_ns`` is 0 (memory costs no time
until it runs out), so memory findings rank after every time finding.
Numbers come from :mod:`explorer.analysis.memory`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.analysis.detectors.context import MAX_EVIDENCE, Context, torch_module
from explorer.analysis.finding import Finding
from explorer.units import fmt_bytes

#: What this detector reports and the breakdown reasons it reads (checked by the registry).
KIND = "memory"
REASONS: tuple[str, ...] = ()

MIN_GROWING = 3
MIN_GROWTH_BYTES = 1 << 20


def detect(ctx: Context) -> list[Finding]:
    if len(ctx.trace.memory) == 0 or len(ctx.steps) < MIN_GROWING + 1:
        return []
    from explorer.analysis import memory

    growth = memory.growth_per_step(ctx.trace)
    peaks = memory.peaks(ctx.trace)
    out: list[Finding] = []
    for device, g in growth.groupby("device", sort=True):
        g = g.sort_values("step")
        alloc = g["allocated_at_end"].to_numpy(np.int64)
        if len(alloc) < MIN_GROWING + 1:
            continue
        d = np.diff(alloc)
        total = int(alloc[-1] - alloc[0])
        peak_rows = peaks[peaks["device"] == device]
        peak = int(peak_rows["peak_bytes"].max()) if len(peak_rows) else int(alloc.max())
        growing = int((d > 0).sum())
        if growing < MIN_GROWING or total < max(MIN_GROWTH_BYTES, 0.02 * peak):
            continue
        suspects = memory.leak_suspects(ctx.trace)
        suspects = suspects[suspects["device"] == device]
        lines = _lines(ctx, suspects)
        per_step = total / (len(alloc) - 1)
        title = f"Memory grows by {fmt_bytes(per_step)} per step on {device} (possible leak)"
        explanation = (
            f"Memory allocated at the end of each step rose in {growing} of {len(d)} steps, "
            f"{fmt_bytes(total)} in all (peak {fmt_bytes(peak)}); {len(suspects)} allocations "
            "made in the steps are never freed."
        )
        recommendation = (
            "Don't keep graph-attached tensors across steps: accumulate losses with "
            "loss.detach() or loss.item() every N steps, clear lists of outputs, and check "
            "caches keyed by step; "
            + (
                "torch.cuda.memory._record_memory_history shows who holds them."
                if torch_module(device) == "torch.cuda"
                else "a memory snapshot of the allocator shows who holds them."
            )
        )
        steps = [int(s) for s, dd in zip(g["step"].to_numpy()[1:], d, strict=True) if dd > 0]
        out.append(
            Finding(
                kind=KIND, title=title, time_lost_ns=0, share=0.0, steps=steps, ranges=[],
                evidence=_evidence(ctx, suspects), source_lines=lines, explanation=explanation,
                recommendation=recommendation, device=str(device),
                details={"growth_bytes": total, "peak_bytes": peak, "per_step_bytes": per_step},
            )
        )  # fmt: skip
    return out


def _lines(ctx: Context, suspects: pd.DataFrame) -> list[tuple[str, int, str]]:
    """The user lines holding the most never-freed bytes."""
    if suspects.empty or "file" not in suspects:
        return []
    known = suspects[suspects["file"].astype(str) != ""]
    if known.empty:
        return []
    func = known["function"] if "function" in known else known["op"]
    g = (
        known.assign(function=func.astype(str))
        .groupby(["file", "line", "function"], sort=False)["bytes"]
        .sum()
        .sort_values(ascending=False)
    )
    return [(str(f), int(ln), str(fn)) for (f, ln, fn) in g.index[:5]]


def _evidence(ctx: Context, suspects: pd.DataFrame) -> list[int]:
    """Host slices (ops) that made the largest never-freed allocations."""
    if suspects.empty or "slice" not in suspects:
        return []
    ids = suspects["slice"].to_numpy(np.int64)
    return [int(i) for i in ids[ids >= 0][:MAX_EVIDENCE]]
