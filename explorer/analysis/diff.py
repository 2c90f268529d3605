"""What changed between two runs: step time, where the time went, which ops and kernels,
which source lines, which findings.

Both traces are summarised the same way and the summaries are compared, so nothing here
assumes the two ran on the same hardware: a CUDA trace against an MTIA or CPU one compares
at the operator (``aten::*``) and source-line level, where kernel names do not match.

Per-step numbers are medians over steps with their spread (the interquartile range), so a
warm-up step does not swing the comparison; op and kernel times are per step (total over
the trace / number of steps), so a trace of 8 steps compares with one of 20.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from explorer.analysis.attribution import frame_codes
from explorer.analysis.breakdown import breakdown
from explorer.analysis.by_source import by_source
from explorer.analysis.findings import findings
from explorer.analysis.steps import counted_steps, partial_steps, step_times
from explorer.analysis.steps import steps as step_table
from explorer.trace.model import PROFILER_STEP, TraceData

#: Kinds compared in the op table (host ops and user annotations such as the DataLoader's
#: ``enumerate(DataLoader)#...``) and the kernel table (device).
OP_KINDS = ("cpu_op", "annotation")
KERNEL_KINDS = ("kernel", "memcpy", "memset", "collective")
#: A finding "changed" when its share of step time moved by at least this much (absolute).
SHARE_CHANGE = 0.02


@dataclass
class TraceDiff:
    """The comparison of trace ``a`` (before) with trace ``b`` (after).

    ``steps``: one row per side — ``side, path, devices, steps, partial_steps, median_ns,
    p25_ns, p75_ns, spread_ns`` (the step time of :func:`explorer.analysis.steps.step_times`,
    the report's: ``steps`` counts the whole steps it is over, ``partial_steps`` those left
    out). ``breakdown``: per category the median share of step time per side
    (``a_ns, a_spread_ns, b_ns, b_spread_ns, delta_ns``). ``ops`` / ``kernels`` / ``lines``:
    per name (or source line) the count (for a line: the times work entered it, see
    :func:`line_entries`) and time per step on each side, ``delta_ns`` and a ``status`` of
    ``added`` (only in b), ``removed`` (only in a), ``changed`` or ``same``. ``findings``: per finding kind the
    time lost and share on each side and a status of ``appeared``, ``disappeared``,
    ``worse``, ``better`` or ``same``. ``notes``: sentences a report shows first.
    """

    a_path: str
    b_path: str
    steps: pd.DataFrame
    breakdown: pd.DataFrame
    ops: pd.DataFrame
    kernels: pd.DataFrame
    lines: pd.DataFrame
    findings: pd.DataFrame
    devices: tuple[list[str], list[str]] = ((), ())  # type: ignore[assignment]
    cross_device: bool = False
    synthetic: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def step_delta_ns(self) -> int:
        """Median step time of ``b`` minus that of ``a``."""
        med = self.steps["median_ns"].to_numpy()
        return int(med[1] - med[0]) if len(med) == 2 else 0

    def to_dict(self) -> dict[str, Any]:
        def rows(df: pd.DataFrame) -> list[dict[str, Any]]:
            return [{k: _plain(v) for k, v in r.items()} for r in df.to_dict("records")]

        return {
            "a": self.a_path,
            "b": self.b_path,
            "devices": {"a": list(self.devices[0]), "b": list(self.devices[1])},
            "cross_device": self.cross_device,
            "synthetic": self.synthetic,
            "step_delta_ns": self.step_delta_ns,
            "notes": list(self.notes),
            "steps": rows(self.steps),
            "breakdown": rows(self.breakdown),
            "ops": rows(self.ops),
            "kernels": rows(self.kernels),
            "lines": rows(self.lines),
            "findings": rows(self.findings),
        }


def _plain(v: Any) -> Any:
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def diff(a: TraceData, b: TraceData) -> TraceDiff:
    """Compare trace ``a`` (before) with trace ``b`` (after)."""
    sa, sb = step_table(a), step_table(b)
    dev_a, dev_b = _devices(a), _devices(b)
    cross = _vendor_set(dev_a) != _vendor_set(dev_b)
    notes: list[str] = []
    if cross:
        notes.append(
            f"The traces ran on different devices ({', '.join(dev_a) or 'host only'} vs "
            f"{', '.join(dev_b) or 'host only'}): kernel names differ by backend, so compare "
            "operators and source lines."
        )
    if a.synthetic or b.synthetic:
        notes.append("SYNTHETIC trace involved: its numbers come from a simulation.")
    steps_df = pd.DataFrame([_step_stats("a", a, sa, dev_a), _step_stats("b", b, sb, dev_b)])
    for side, trace in (("a", a), ("b", b)):
        for n, why in partial_steps(trace).items():
            notes.append(f"{side}: step {n} is partial ({why}): left out of the step time.")
    n_a, n_b = max(len(sa), 1), max(len(sb), 1)
    out = TraceDiff(
        a_path=a.path,
        b_path=b.path,
        steps=steps_df,
        breakdown=_breakdown_delta(a, b),
        ops=_name_delta(a, b, OP_KINDS, n_a, n_b),
        kernels=_name_delta(a, b, KERNEL_KINDS, n_a, n_b),
        lines=_line_delta(a, b, n_a, n_b),
        findings=_finding_delta(a, b),
        devices=(dev_a, dev_b),
        cross_device=cross,
        synthetic=bool(a.synthetic or b.synthetic),
        notes=notes,
    )
    med = steps_df["median_ns"].to_numpy()
    if med[0] > 0 and med[1] != med[0]:
        change = (med[1] - med[0]) / med[0]
        word = "slower" if change > 0 else "faster"
        notes.insert(0, f"Median step time {abs(change):.1%} {word} in b.")
    elif med[0] > 0:
        notes.insert(0, "Median step time unchanged.")
    return out


def _devices(trace: TraceData) -> list[str]:
    """Device labels (``cuda:0``, ``mtia:17``) of the device tracks that carry slices."""
    from explorer.analysis.breakdown import track_device_labels

    labels = track_device_labels(trace)
    return sorted(set(labels.values())) if labels else []


def _vendor_set(devices: list[str]) -> set[str]:
    return {d.split(":")[0] for d in devices}


def _step_stats(
    side: str, trace: TraceData, table: pd.DataFrame, devices: list[str]
) -> dict[str, Any]:
    # the report's step time (one definition: attributed windows, partial steps left out)
    dur = step_times(trace) if len(table) else np.zeros(1, np.int64)
    p25, med, p75 = np.percentile(dur, [25, 50, 75])
    return {
        "side": side,
        "path": trace.path,
        "devices": ", ".join(devices) or "host",
        "steps": int(len(dur)) if len(table) else 0,  # the steps the median is over
        "partial_steps": int(len(table) - len(dur)) if len(table) else 0,
        "median_ns": int(round(med)),
        "p25_ns": int(round(p25)),
        "p75_ns": int(round(p75)),
        "spread_ns": int(round(p75 - p25)),
    }


def _category_stats(trace: TraceData) -> pd.DataFrame:
    """Per category: median over steps of the time (mean over devices, which still sums to
    the step time), and the interquartile spread."""
    bd = breakdown(trace)
    bd = bd[bd["step"].isin(counted_steps(trace)["step"])]  # as the step time: whole steps
    if len(bd) == 0:
        return pd.DataFrame(columns=["category", "ns", "spread_ns"])
    per_step = (
        bd.groupby(["step", "category"], sort=False, observed=True)["ns"].mean().reset_index()
    )
    g = per_step.groupby("category", sort=False, observed=True)["ns"]
    out = pd.DataFrame(
        {
            "ns": g.median(),
            "spread_ns": g.quantile(0.75) - g.quantile(0.25),
        }
    ).reset_index()
    return out


def _breakdown_delta(a: TraceData, b: TraceData) -> pd.DataFrame:
    from explorer.analysis.breakdown import CATEGORIES

    ca = _category_stats(a).set_index("category")
    cb = _category_stats(b).set_index("category")
    out = pd.DataFrame({"category": list(CATEGORIES)})
    for side, df in (("a", ca), ("b", cb)):
        out[f"{side}_ns"] = (
            df["ns"].reindex(CATEGORIES).fillna(0).round().astype(np.int64).to_numpy()
        )
        out[f"{side}_spread_ns"] = (
            df["spread_ns"].reindex(CATEGORIES).fillna(0).round().astype(np.int64).to_numpy()
        )
    out["delta_ns"] = out["b_ns"] - out["a_ns"]
    return out


def _per_name(trace: TraceData, kinds: tuple[str, ...]) -> pd.DataFrame:
    """Count and total inclusive time per (name, kind), over slices of ``kinds``."""
    s = trace.slices
    mask = s["kind"].isin(kinds).to_numpy().copy()
    # Step markers are numbered (ProfilerStep#7): the step table compares them, not this one.
    mask &= ~trace.name_matches(PROFILER_STEP)
    # Annotations count on host threads only: the profiler's own "PyTorch Profiler (0)" span
    # and the device copies of user annotations are not the user's ops.
    mask &= trace.on_host() | (s["kind"].to_numpy() != "annotation")
    if not mask.any():
        return pd.DataFrame({"name": [], "kind": [], "count": [], "ns": []})
    df = pd.DataFrame(
        {
            "name": s["name"].to_numpy()[mask],
            "kind": s["kind"].to_numpy()[mask],
            "dur": s["dur"].to_numpy()[mask],
        }
    )
    g = df.groupby(["name", "kind"], sort=False, observed=True)["dur"]
    out = pd.DataFrame({"count": g.size(), "ns": g.sum()}).reset_index()
    out["name"] = out["name"].astype(str)
    out["kind"] = out["kind"].astype(str)
    return out


def _status(
    in_a: np.ndarray, in_b: np.ndarray, a_rate: np.ndarray, b_rate: np.ndarray, delta: np.ndarray
) -> np.ndarray:
    """``added`` (only in b), ``removed`` (only in a), ``same`` (as often per step and as long
    per step on both sides), else ``changed``. Presence is having run at all (count or time),
    so a line that only holds time is never "added" on the side it ran on."""
    same = np.isclose(a_rate, b_rate) & (delta == 0)
    return np.select(
        [~in_a & in_b, in_a & ~in_b, same], ["added", "removed", "same"], "changed"
    ).astype(object)


def _name_delta(
    a: TraceData, b: TraceData, kinds: tuple[str, ...], n_a: int, n_b: int
) -> pd.DataFrame:
    pa, pb = _per_name(a, kinds), _per_name(b, kinds)
    m = pa.merge(pb, on=["name", "kind"], how="outer", suffixes=("_a", "_b"))
    return _finish(m, ["name", "kind"], n_a, n_b)


def _finish(m: pd.DataFrame, keys: list[str], n_a: int, n_b: int) -> pd.DataFrame:
    """Counts and per-step times on both sides, the delta, the status; biggest change first."""
    for c in ("count_a", "count_b", "ns_a", "ns_b"):
        m[c] = m[c].fillna(0).astype(np.int64)
    out = m[keys].copy()
    out["a_count"], out["b_count"] = m["count_a"], m["count_b"]
    out["a_ns_per_step"] = (m["ns_a"] / n_a).round().astype(np.int64)
    out["b_ns_per_step"] = (m["ns_b"] / n_b).round().astype(np.int64)
    out["delta_ns"] = out["b_ns_per_step"] - out["a_ns_per_step"]
    out["status"] = _status(
        ((m["count_a"] > 0) | (m["ns_a"] > 0)).to_numpy(),
        ((m["count_b"] > 0) | (m["ns_b"] > 0)).to_numpy(),
        m["count_a"].to_numpy() / n_a,
        m["count_b"].to_numpy() / n_b,
        out["delta_ns"].to_numpy(),
    )
    order = np.argsort(-np.abs(out["delta_ns"].to_numpy()), kind="stable")
    return out.iloc[order].reset_index(drop=True)


def line_entries(trace: TraceData) -> pd.DataFrame:
    """Per user line, how many times work entered it: host slices attributed to the line
    whose parent is not (a Python frame and the ops under it count once). The count that
    goes with the line's host + device time: every slice that holds that time is under one
    of these entries, or was launched from one."""
    code, frames = frame_codes(trace)
    s = trace.slices
    parent = s["parent"].to_numpy(np.int64)
    parent_code = np.where(parent >= 0, code[np.maximum(parent, 0)], -1)
    entry = (code >= 0) & (parent_code != code) & trace.on_host()
    out = frames.copy()
    out["line"] = out["line"].astype(np.int64)
    out["entries"] = np.bincount(code[entry], minlength=len(frames)).astype(np.int64)
    return out


def _line_delta(a: TraceData, b: TraceData, n_a: int, n_b: int) -> pd.DataFrame:
    keys = ["file", "line", "function"]

    def side(t: TraceData) -> pd.DataFrame:
        bs = by_source(t)
        if len(bs) == 0:
            return pd.DataFrame({**{k: [] for k in keys}, "count": [], "ns": []})
        bs = bs.merge(line_entries(t), on=keys, how="left")
        return pd.DataFrame(
            {
                "file": bs["file"].astype(str),
                "line": bs["line"].astype(np.int64),
                "function": bs["function"].astype(str),
                "count": bs["entries"].fillna(0).astype(np.int64),
                "ns": (bs["host_ns"] + bs["device_ns"]).astype(np.int64),
            }
        )

    m = side(a).merge(side(b), on=keys, how="outer", suffixes=("_a", "_b"))
    m["line"] = m["line"].astype(np.int64)
    return _finish(m, keys, n_a, n_b)


def _finding_delta(a: TraceData, b: TraceData) -> pd.DataFrame:
    """Findings per kind on each side; a kind's status says whether it appeared,
    disappeared, or got worse or better (its share of step time moved >= 2 points)."""

    def side(t: TraceData) -> pd.DataFrame:
        rows = [(f.kind, f.title, int(f.time_lost_ns), float(f.share)) for f in findings(t)]
        df = pd.DataFrame(rows, columns=["kind", "title", "ns", "share"])
        return (
            df.groupby("kind", sort=False)
            .agg(title=("title", "first"), ns=("ns", "sum"), share=("share", "sum"))
            .reset_index()
        )

    m = side(a).merge(side(b), on="kind", how="outer", suffixes=("_a", "_b"))
    out = pd.DataFrame(
        {
            "kind": m["kind"],
            "title": m["title_b"].fillna(m["title_a"]).fillna(""),
            "a_time_lost_ns": m["ns_a"].fillna(0).astype(np.int64),
            "b_time_lost_ns": m["ns_b"].fillna(0).astype(np.int64),
            "a_share": m["share_a"].fillna(0.0),
            "b_share": m["share_b"].fillna(0.0),
        }
    )
    d = out["b_share"] - out["a_share"]
    out["status"] = np.select(
        [m["ns_a"].isna(), m["ns_b"].isna(), d >= SHARE_CHANGE, d <= -SHARE_CHANGE],
        ["appeared", "disappeared", "worse", "better"],
        "same",
    )
    out["delta_ns"] = out["b_time_lost_ns"] - out["a_time_lost_ns"]
    order = np.argsort(-np.abs(out["delta_ns"].to_numpy()), kind="stable")
    return out.iloc[order].reset_index(drop=True)
