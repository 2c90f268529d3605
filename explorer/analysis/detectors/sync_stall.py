"""``sync_stall``: host synchronisations that drain the device queue.

``.item()``, ``.cpu()``, ``nonzero``, ``cudaStreamSynchronize`` and friends block the host
until the device has finished everything queued; after they return the device stays idle
until the host has launched new work. Both parts are measured: the breakdown's
``host_sync`` reason (device idle while the host waits) and ``sync_refill`` (device idle
right after a sync returns, until the next device work). Counts and lines come from the
outermost sync slices on the host.

On CPU-only traces (host mode) a sync waits for no device: its time is the op's own, and a
single slow one is the scheduler, not the code (a loaded machine stretched one step's
``.item()`` from 11 µs to 3.5 ms). There the time must recur: more than
:data:`HOST_MIN_STEPS` of the steps spend :data:`MIN_SHARE` of their own time in
syncs (a loaded machine can stretch the odd one; a habit of the code is in every step).
"""

from __future__ import annotations

import numpy as np

from explorer.analysis.cause_lines import cause_lines
from explorer.analysis.classify import classes
from explorer.analysis.detectors.context import MAX_EVIDENCE, MIN_SHARE, Context, torch_module
from explorer.analysis.finding import Finding
from explorer.units import fmt_ns

#: What this detector reports and the breakdown reasons it reads (checked by the registry).
KIND = "sync_stall"
REASONS: tuple[str, ...] = ("host_sync", "sync_refill")

#: In host mode, more than this share of the steps must spend MIN_SHARE of their time in syncs.
HOST_MIN_STEPS = 0.5


def detect(ctx: Context) -> list[Finding]:
    m = ctx.measure("host_sync", "sync_refill")
    if not ctx.significant(m):
        return []
    assert m is not None
    if not ctx.device_mode and not _recurs(ctx, m.per_step):
        return []
    sync = ctx.outermost(classes(ctx.trace).host_sync)
    in_steps = ctx.starts_in_steps
    n_sync = int(np.count_nonzero(sync & in_steps))
    n_steps = max(len(ctx.steps), 1)
    title = f"Sync stall: {n_sync / n_steps:.3g} host syncs per step drain the device queue"
    api = torch_module(m.device)
    examples = ".item(), .cpu()" + (f", {api}.synchronize()" if api else "")
    explanation = (
        f"{n_sync} synchronisations (e.g. {examples}) make the host "
        f"wait for {m.device}; each one empties the queue, so the device then idles until the host "
        f"launches again — {fmt_ns(m.total)} in all."
    )
    recommendation = (
        "Keep values on the device: accumulate metrics as tensors and call .item() once per N "
        "steps, avoid data-dependent shapes (nonzero, boolean masks) in the hot loop, and drop "
        "explicit synchronize() calls outside of timing code."
    )
    # The lines are weighted by the syncs' own time, not by their overlap.
    ids = np.flatnonzero(sync & in_steps)
    f = ctx.finding(
        KIND, m, sync, title, explanation, recommendation,
        details={"sync_count": n_sync, "syncs_per_step": n_sync / n_steps},
        source_lines=cause_lines(ctx.trace, ids, ctx.end[ids] - ctx.ts[ids]),
    )  # fmt: skip
    # Evidence overlap uses the first part's reason; weight the lines by the syncs' own time.
    if not f.evidence:
        dur = ctx.end[ids] - ctx.ts[ids]
        order = np.argsort(-dur, kind="stable")[:MAX_EVIDENCE]
        f.evidence = [int(i) for i in ids[order]]
    return [f]


def _recurs(ctx: Context, per_step: np.ndarray) -> bool:
    """Do more than HOST_MIN_STEPS of the steps spend MIN_SHARE of their time in syncs?"""
    dur = ctx.steps["dur_ns"].to_numpy(np.int64)
    if not len(dur):
        return False
    hit = per_step >= MIN_SHARE * np.maximum(dur, 1)
    return bool(np.count_nonzero(hit) > HOST_MIN_STEPS * len(dur))
