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

from explorer.analysis.attribution import launcher, top_lines
from explorer.analysis.detectors.context import MAX_EVIDENCE, Context, Measured
from explorer.analysis.finding import Finding
from explorer.trace.columns import category_values
from explorer.units import fmt_ns

#: What this detector reports and the breakdown reasons it reads (checked by the registry).
KIND = "cpu_fallback"
REASONS: tuple[str, ...] = (
    "host_fallback",
    "fallback_refill",
    "dev_copy",
    "copy_refill",
    "host_busy",
)


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
        {"op": op[keep], "kind": ctx.kind[dev[keep]], "dir": category_values(s["copy_kind"])[dev[keep]],
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


def _ops_by_time(ctx: Context, labelled: np.ndarray, pattern: np.ndarray) -> pd.DataFrame:
    """One row per operator that fell back, the costliest first: ``op``, ``calls``,
    ``time_ns`` (their summed duration) and ``line`` (``file:line`` of the user code that
    called it most, by time; "" when the trace does not say). The line comes from the
    labelled fallbacks when the op has any (they carry the line the backend's warning
    named), else from the ops that show the fallback's copy pattern."""
    ids = np.concatenate([labelled, pattern])
    names = [str(ctx.trace.args(int(i)).get("op") or ctx.trace.slices["name"].iat[i]) for i in ids]
    df = pd.DataFrame(
        {"op": names, "id": ids, "dur": ctx.end[ids] - ctx.ts[ids],
         "labelled": np.arange(len(ids)) < len(labelled)}
    )  # fmt: skip
    rows = []
    for op, g in df.groupby("op", sort=False):
        src = g[g["labelled"]] if g["labelled"].any() else g
        top = top_lines(ctx.trace, src["id"].to_numpy(), src["dur"].to_numpy(float), top=1)
        line = f"{top[0][0]}:{top[0][1]}" if top else ""
        rows.append((str(op), len(g), int(g["dur"].sum()), line))
    out = pd.DataFrame(rows, columns=["op", "calls", "time_ns", "line"])
    return out.sort_values("time_ns", ascending=False, kind="stable").reset_index(drop=True)


def _short(line: str) -> str:
    """``train.py:13`` for ``/home/me/project/train.py:13``: the title stays one line."""
    path, _, number = line.rpartition(":")
    return f"{path.rsplit('/', 1)[-1]}:{number}"


def fallback_windows(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    """(labelled, pattern): outermost collector fallback slices, and unlabelled host ops
    that look like a fallback. The memcpy detector leaves their copies to this one."""
    if not ctx.device_mode:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    labelled = np.flatnonzero(ctx.outermost((ctx.kind == "fallback") & ~ctx.on_device))
    pattern = _pattern_ops(ctx)
    if len(labelled) and len(pattern):
        # a pattern op inside a labelled fallback, or around one (``aten::max_pool2d``
        # around the ``max_pool2d_with_indices`` that fell back), is the same fallback
        same = np.zeros(len(pattern), bool)
        p_ts, p_end = ctx.ts[pattern], ctx.end[pattern]
        track = ctx.trace.slices["track"].to_numpy()
        for i in labelled:
            inside = (p_ts >= ctx.ts[i]) & (p_end <= ctx.end[i])
            around = (p_ts <= ctx.ts[i]) & (p_end >= ctx.end[i]) & (track[pattern] == track[i])
            same |= inside | around
        pattern = pattern[~same]
    return labelled, pattern


def detect(ctx: Context) -> list[Finding]:
    """Time lost per fallback: its copies out and back, the device idle while the CPU
    computes, and the idle after it returns until the next device work."""
    labelled, pattern = fallback_windows(ctx)
    if len(labelled) == 0 and len(pattern) == 0:
        return []
    m = ctx.measure("host_fallback", "fallback_refill")
    device = m.device if m is not None and m.total else next(iter(ctx.timelines))
    ids = np.concatenate([labelled, pattern])
    per = (
        np.zeros(len(ctx.steps), np.int64) if m is None or m.device != device else m.per_step.copy()
    )
    per += ctx.in_windows(device, "dev_copy", ids)
    if len(pattern):
        per += ctx.in_windows(device, "copy_refill", pattern)
        per += ctx.in_windows(device, "host_busy", pattern)
    ranges = (
        np.stack([ctx.ts[ids], ctx.end[ids]], axis=1) if len(ids) else np.zeros((0, 2), np.int64)
    )
    m = Measured(device, "host_fallback", per, ranges, ("host_fallback", "dev_copy", "host_busy"))
    if not ctx.significant(m):
        return []
    per_op = _ops_by_time(ctx, labelled, pattern)
    ops = per_op["op"].tolist()
    # The title names the costliest op the user can find in their code: a backward op
    # (``sigmoid_backward``, run on autograd's thread) has no line of its own, and naming it
    # first would hide the forward call that is the one to change.
    located = per_op[per_op["line"] != ""]
    top = (located if len(located) else per_op).iloc[0]
    where = f" at {_short(top['line'])}" if top["line"] else ""
    more = f" and {len(ops) - 1} more operator(s)" if len(ops) > 1 else ""
    title = f"CPU fallback: {top['op']}{where}{more} ran on the CPU ({len(ids)} call(s))"
    explanation = (
        f"These operators have no {device.split(':')[0]} kernel (or were forced to the CPU): the "
        "inputs are copied to the host, computed there and copied back, and the device waits "
        f"for all of it — {fmt_ns(m.total)} in all."
    )
    recommendation = (
        "Use an operator the backend implements (the fallback message names it), upgrade the "
        "backend/torch version, or move this computation out of the training step (e.g. into "
        "the DataLoader workers)."
    )
    candidates = np.zeros(len(ctx.kind), bool)
    candidates[ids] = True
    f = ctx.finding(
        KIND, m, candidates, title, explanation, recommendation,
        details={
            "calls": len(ids), "ops": ops[:20], "from_pattern": int(len(pattern)),
            "op_lines": {str(r.op): str(r.line) for r in per_op.head(20).itertuples()},
        },
    )  # fmt: skip
    if not f.evidence:
        f.evidence = [int(i) for i in ids[:MAX_EVIDENCE]]
    return [f]
