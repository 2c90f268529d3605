"""``cpu_fallback``: operators that ran on the CPU inside an accelerator workload.

Two sources:

- the collector's ``explorer_fallback`` events (kind ``fallback``, args ``op``/``message``):
  measured as the breakdown's ``host_fallback`` reason — device idle while the host runs
  the fallback;
- the trace pattern a fallback leaves when nobody labelled it: a host operator whose only
  device work is a device→host copy followed by a host→device copy (the CPU computed in
  between). Those operators' own host time between the two copies is added when the
  device was idle then (it already is ``host_busy`` in the breakdown, and is counted here).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.analysis.attribution import launcher
from explorer.analysis.detectors.context import Context, Measured, fmt_ns
from explorer.analysis.finding import Finding


def _pattern_ops(ctx: Context) -> np.ndarray:
    """Ids of outermost host ops whose device work is exactly DtoH copies then HtoD copies."""
    s = ctx.trace.slices
    src = launcher(ctx.trace)
    dev = np.flatnonzero(ctx.on_device & (src >= 0))
    if len(dev) == 0:
        return np.zeros(0, np.int64)
    # the outermost cpu_op enclosing each launch: walk parents (loop per depth)
    parent = s["parent"].to_numpy(np.int64)
    is_op = ctx.kind == "cpu_op"
    op = np.where(is_op[src[dev]], src[dev], -1)
    cur = src[dev].copy()
    for _ in range(int(s["depth"].max()) + 1):
        up = parent[cur]
        ok = up >= 0
        if not ok.any():
            break
        cur = np.where(ok, up, cur)
        op = np.where(ok & is_op[cur], cur, op)
    keep = op >= 0
    df = pd.DataFrame(
        {"op": op[keep], "kind": ctx.kind[dev[keep]], "dir": s["copy_kind"].to_numpy().astype(object)[dev[keep]],
         "ts": ctx.ts[dev[keep]]}
    )  # fmt: skip
    if df.empty:
        return np.zeros(0, np.int64)
    df["dtoh"] = (df["kind"] == "memcpy") & (df["dir"] == "DtoH")
    df["htod"] = (df["kind"] == "memcpy") & (df["dir"] == "HtoD")
    g = df.groupby("op").agg(
        n=("kind", "size"), dtoh=("dtoh", "sum"), htod=("htod", "sum"),
    )  # fmt: skip
    only_copies = (g["dtoh"] > 0) & (g["htod"] > 0) & (g["dtoh"] + g["htod"] == g["n"])
    cand = g.index[only_copies].to_numpy(np.int64)
    if len(cand) == 0:
        return cand
    # D2H must come first: the earliest device work of the op is a DtoH copy
    first = df[df["op"].isin(cand)].sort_values("ts").drop_duplicates("op")
    return first.loc[first["dtoh"], "op"].to_numpy(np.int64)


def detect(ctx: Context) -> list[Finding]:
    if not ctx.device_mode:
        return []
    labelled = ctx.kind == "fallback"
    m = ctx.measure("host_fallback") if labelled.any() else None
    pattern = _pattern_ops(ctx)
    mp = None
    if len(pattern):
        busy = ctx.measure("host_busy")
        if busy is not None:
            per = np.zeros(len(ctx.steps), np.int64)
            tl = ctx.timelines[busy.device]
            for j, (s, e) in enumerate(
                zip(ctx.steps["start_ns"], ctx.steps["end_ns"], strict=True)
            ):
                a = np.maximum(ctx.ts[pattern], s)
                b = np.minimum(ctx.end[pattern], e)
                ok = b > a
                per[j] = int(tl.reason_ns("host_busy", a[ok], b[ok]).sum())
            mp = Measured(busy.device, "host_busy", per, np.zeros((0, 2), np.int64))
    if m is None and mp is None:
        return []
    if m is None:
        m = mp
    elif mp is not None and mp.device == m.device:
        m = Measured(m.device, m.reason, m.per_step + mp.per_step, m.ranges)
    assert m is not None
    if not ctx.significant(m):
        return []
    cand = labelled.copy()
    cand[pattern] = True
    ids = np.flatnonzero(cand)
    ops = sorted(
        {str(ctx.trace.args(i).get("op") or ctx.trace.slices["name"].iat[i]) for i in ids[:200]}
    )
    title = f"CPU fallback: {len(ids)} operator call(s) ran on the CPU ({', '.join(ops[:3])})"
    explanation = (
        f"These operators have no {m.device.split(':')[0]} kernel (or were forced to the CPU): the "
        f"inputs are copied to the host, computed there, and copied back, while the device idles "
        f"for {fmt_ns(m.total)}."
    )
    recommendation = (
        "Use an operator the backend implements (check the fallback message), upgrade the "
        "backend/torch version, or move this computation out of the step; avoid "
        "PYTORCH_ENABLE_MPS_FALLBACK-style silent fallbacks in hot loops."
    )
    f = ctx.finding(
        "cpu_fallback", m, cand, title, explanation, recommendation,
        details={"calls": len(ids), "ops": ops[:20], "from_pattern": int(len(pattern))},
    )  # fmt: skip
    if not f.evidence:
        f.evidence = [int(i) for i in ids[:50]]
    return [f]
