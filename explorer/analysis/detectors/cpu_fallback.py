"""``cpu_fallback``: operators that ran on the CPU inside an accelerator workload.

The calls are found from host evidence (:mod:`explorer.analysis.fallback_calls`): the
collector's ``explorer_fallback`` slices (the backend's warning, with the user's line) and
the ``aten::_to_cpu`` any backend's CPU fallback leaves inside the operator. With a device
timeline, two more sources and the device's view of the cost:

- the collector's ``explorer_fallback`` events measured as the breakdown's
  ``host_fallback`` reason — device idle while the host runs the fallback;
- the trace pattern a fallback leaves when nobody labelled it: a host operator whose only
  device work is a device→host copy followed by a host→device copy (the CPU computed in
  between). Those operators' own host time between the two copies is added when the
  device was idle then (it already is ``host_busy`` in the breakdown, and is counted here).

Without one (a backend that records no device activity) the cost is each call's host time:
the copy out, the CPU kernel and the copies back, per call and per step.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.analysis.attribution import launcher, top_lines
from explorer.analysis.detectors.context import MAX_EVIDENCE, Context, Measured
from explorer.analysis.device_naming import device_naming
from explorer.analysis.fallback_calls import fallback_calls
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
    "host_compute",
    "host_copy",
)
#: What a call's host time is made of, when there is no device timeline to measure on.
_HOST_CALL_REASONS = ("host_fallback", "host_compute", "host_copy", "host_busy")


def _pattern_ops(ctx: Context) -> np.ndarray:
    """Ids of outermost host ops whose device work is exactly DtoH copies then HtoD copies."""
    s = ctx.trace.slices
    src = launcher(ctx.trace)
    dev = np.flatnonzero(ctx.on_device & (src >= 0))
    if len(dev) == 0:
        return np.zeros(0, np.int64)
    # the outermost cpu_op enclosing each launch: walk parents (loop per depth)
    parent = s["parent"].to_numpy(np.int64)
    is_op = ctx.trace.kind_in("cpu_op")
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
    ``time_ns`` (their summed duration), ``copy_out_ns`` / ``copy_back_ns`` / ``cpu_ns``
    (that time split as :func:`fallback_calls` measures it on the host; 0 where no call
    of the op has a duration) and ``line`` (``file:line`` of the user code that called it
    most, by time; "" when the trace does not say; ``frame`` the same as (file, line,
    function) or None). The line comes from the backend's warning when it named one, else
    from the labelled fallbacks when the op has any, else from the ops that show the
    fallback's copy pattern."""
    ids = np.concatenate([labelled, pattern])
    names = [str(ctx.trace.args(int(i)).get("op") or ctx.trace.slices["name"].iat[i]) for i in ids]
    df = pd.DataFrame(
        {"op": names, "id": ids, "dur": ctx.end[ids] - ctx.ts[ids],
         "labelled": np.arange(len(ids)) < len(labelled)}
    )  # fmt: skip
    parts = fallback_calls(ctx.trace).set_index("id")[["copy_out_ns", "copy_back_ns", "cpu_ns"]]
    df = df.join(parts, on="id").fillna({"copy_out_ns": 0, "copy_back_ns": 0, "cpu_ns": 0})
    rows = []
    for op, g in df.groupby("op", sort=False):
        timed = g[g["dur"] > 0]
        calls = g if timed.empty else timed  # a warning alone is a call; beside timed ones, not
        # the backend's warning names the line that called the op (the profiler's frame
        # only the function): its line first, then the timed calls' by time
        warned = g[(g["dur"] == 0) & g["labelled"]]
        top = top_lines(ctx.trace, warned["id"].to_numpy(), top=1) if len(warned) < len(g) else []
        if not top:
            src = calls[calls["labelled"]] if calls["labelled"].any() else calls
            top = top_lines(ctx.trace, src["id"].to_numpy(), src["dur"].to_numpy(float), top=1)
        line = f"{top[0][0]}:{top[0][1]}" if top else ""
        rows.append(
            (str(op), len(calls), int(calls["dur"].sum()), int(calls["copy_out_ns"].sum()),
             int(calls["copy_back_ns"].sum()), int(calls["cpu_ns"].sum()), line,
             top[0] if top else None)
        )  # fmt: skip
    columns = ["op", "calls", "time_ns", "copy_out_ns", "copy_back_ns", "cpu_ns", "line", "frame"]
    out = pd.DataFrame(rows, columns=columns)
    return out.sort_values("time_ns", ascending=False, kind="stable").reset_index(drop=True)


def _short(line: str) -> str:
    """``train.py:13`` for ``/home/me/project/train.py:13``: the title stays one line."""
    path, _, number = line.rpartition(":")
    return f"{path.rsplit('/', 1)[-1]}:{number}"


def fallback_windows(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    """(labelled, pattern): outermost collector fallback slices, and unlabelled host ops
    that look like a fallback. The memcpy detector leaves their copies to this one.
    Computed once per context; callers must not modify what it returns."""
    got: tuple[np.ndarray, np.ndarray] = ctx.once(KIND, lambda: _fallback_windows(ctx))
    return got


def _fallback_windows(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    if not ctx.device_mode:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    labelled = np.flatnonzero(ctx.outermost(ctx.trace.kind_in("fallback") & ~ctx.on_device))
    calls = fallback_calls(ctx.trace)
    marked = calls.loc[~calls["labelled"].astype(bool), "id"].to_numpy(np.int64)
    labelled = np.sort(np.concatenate([labelled, marked]))
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


def _host_measure(ctx: Context, ids: np.ndarray) -> Measured:
    """The calls' host time per step (their union, clipped to each step): with no device
    timeline, the time the fallbacks took is the time they cost."""
    order = np.argsort(ctx.ts[ids], kind="stable")
    a, b = ctx.ts[ids][order], ctx.end[ids][order]
    reach = np.maximum.accumulate(b)
    new = np.concatenate([[True], a[1:] > reach[:-1]])
    group = np.cumsum(new) - 1
    starts = a[new]
    ends = np.zeros(len(starts), np.int64)
    np.maximum.at(ends, group, b)
    per = np.zeros(len(ctx.steps), np.int64)
    ranges = []
    for j, (s, e) in enumerate(zip(ctx.steps["start_ns"], ctx.steps["end_ns"], strict=True)):
        lo, hi = np.maximum(starts, s), np.minimum(ends, e)
        ok = hi > lo
        per[j] = int((hi[ok] - lo[ok]).sum())
        ranges.append(np.stack([lo[ok], hi[ok]], axis=1))
    rng = np.concatenate(ranges) if ranges else np.zeros((0, 2), np.int64)
    return Measured("host", "host_fallback", per, rng, _HOST_CALL_REASONS)


def detect(ctx: Context) -> list[Finding]:
    """Time lost per fallback. With a device timeline: its copies out and back, the device
    idle while the CPU computes, and the idle after it returns until the next device work.
    Without one: each call's host time — copy out, CPU kernel, copies back."""
    if not ctx.device_mode:
        return _detect_on_host(ctx)
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
    explanation = (
        f"These operators have no {device.split(':')[0]} kernel (or were forced to the CPU): the "
        "inputs are copied to the host, computed there and copied back, and the device waits "
        f"for all of it — {fmt_ns(m.total)} in all."
    )
    return [_finding(ctx, m, labelled, pattern, explanation)]


def _detect_on_host(ctx: Context) -> list[Finding]:
    """The fallbacks of a trace without a device timeline, measured on the host."""
    calls = fallback_calls(ctx.trace)
    instants = np.flatnonzero(
        ctx.outermost(ctx.trace.kind_in("fallback") & ~ctx.on_device) & (ctx.end == ctx.ts)
    )
    ids = calls["id"].to_numpy(np.int64)
    if len(ids) == 0:
        return []
    m = _host_measure(ctx, ids)
    if not ctx.significant(m):
        return []
    naming = device_naming(ctx.trace)
    device = naming.devices[0] if naming.devices else ""
    out_ns, back_ns = int(calls["copy_out_ns"].sum()), int(calls["copy_back_ns"].sum())
    explanation = (
        f"These operators have no {device.split(':')[0] or 'device'} kernel: each call copies "
        f"its inputs from {device or 'the device'} to the host, runs the CPU "
        "kernel and copies "
        f"the results back — {fmt_ns(m.total // max(len(ids), 1))} per call, "
        f"{fmt_ns(m.total)} in all, of which {fmt_ns(out_ns)} copying out and "
        f"{fmt_ns(back_ns)} copying back. Device-side time was not recorded (the trace has "
        "no device timeline): these are the host's times."
    )
    # the warnings name the line; their calls carry the time
    return [_finding(ctx, m, np.concatenate([ids, instants]), np.zeros(0, np.int64), explanation)]


def _finding(
    ctx: Context, m: Measured, labelled: np.ndarray, pattern: np.ndarray, explanation: str
) -> Finding:
    ids = np.concatenate([labelled, pattern])
    per_op = _ops_by_time(ctx, labelled, pattern)
    ops = per_op["op"].tolist()
    calls = int(per_op["calls"].sum())
    # The title names the costliest op the user can find in their code: a backward op
    # (``sigmoid_backward``, run on autograd's thread) has no line of its own, and naming it
    # first would hide the forward call that is the one to change.
    located = per_op[per_op["line"] != ""]
    top = (located if len(located) else per_op).iloc[0]
    where = f" at {_short(top['line'])}" if top["line"] else ""
    more = f" and {len(ops) - 1} more operator(s)" if len(ops) > 1 else ""
    title = f"CPU fallback: {top['op']}{where}{more} ran on the CPU ({calls} call(s))"
    recommendation = (
        "Use an operator the backend implements (the fallback message names it), upgrade the "
        "backend/torch version, or move this computation out of the training step (e.g. into "
        "the DataLoader workers)."
    )
    candidates = np.zeros(len(ctx.ts), bool)
    candidates[ids] = True
    per_call = {
        str(r.op): {
            "calls": int(r.calls),
            "time_ns": int(r.time_ns),
            "per_call_ns": int(r.time_ns) // max(int(r.calls), 1),
            "copy_out_ns": int(r.copy_out_ns),
            "copy_back_ns": int(r.copy_back_ns),
            "cpu_ns": int(r.cpu_ns),
            "line": str(r.line),
        }
        for r in per_op.head(20).itertuples()
    }
    f = ctx.finding(
        KIND, m, candidates, title, explanation, recommendation,
        details={
            "calls": calls, "ops": ops[:20], "from_pattern": int(len(pattern)),
            "op_lines": {str(r.op): str(r.line) for r in per_op.head(20).itertuples()},
            "per_op": per_call,
        },
    )  # fmt: skip
    if not f.evidence:
        f.evidence = [int(i) for i in ids[:MAX_EVIDENCE]]
    # each op's own line (the one its warning named) before the lines its time inherits
    named = [fr for fr in per_op["frame"] if fr is not None]
    f.source_lines = list(dict.fromkeys([*named, *f.source_lines]))[:5]
    return f
