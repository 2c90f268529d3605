"""``explorer diff RUN_A RUN_B``: two jobs compared rank by rank.

Works on two job report documents (:func:`explorer.job.job_document`):

- the job: mean step time, collective wait share and the straggler's cost, A and B;
- each rank: median step time in A and B (from the rank × step matrix), and its time per
  step by breakdown category in A and B — the categories partition the step, so a rank's
  category changes add up to the change of its mean step;
- the straggler before and after: which rank, what it cost the others, and its causes with
  their source lines;
- collectives by operation: the ranks' mean wait per step in A and B.

Per-step figures divide by each rank's own step count, so jobs of different lengths compare.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from explorer.errors import UsageError
from explorer.units import fmt_ns

JOB_DIFF_FORMATS: tuple[str, ...] = ("text", "json")
#: Per rank, the text lists the categories whose time per step changed most, up to this many.
TOP_CATEGORIES = 2


def _medians(doc: dict[str, Any]) -> dict[int, int | None]:
    out: dict[int, int | None] = {}
    for rank, row in doc["step_matrix"].items():
        steps = [v for v in row if v is not None]
        out[int(rank)] = int(np.median(steps)) if steps else None
    return out


def _per_step(doc: dict[str, Any]) -> dict[int, dict[str, float]]:
    """Per rank: each breakdown category's time per step."""
    return {
        int(r["rank"]): {c: ns / max(int(r["steps"]), 1) for c, ns in r["breakdown"].items()}
        for r in doc["ranks"]
    }


def _straggler(doc: dict[str, Any]) -> dict[str, Any] | None:
    s = doc["straggler"]
    if s is None:
        return None
    return {
        "rank": int(s["rank"]),
        "share": float(s["share"]),
        "others_wait_ns_per_step": int(s["others_wait_ns_per_step"]),
        "causes": [
            {k: c[k] for k in ("what", "excess_ns_per_step", "file", "line", "function")}
            for c in s["causes"]
        ],
    }


def _wait_by_op(doc: dict[str, Any]) -> dict[str, float]:
    """Per collective operation: the ranks' mean wait in it, per step."""
    steps = max(len(doc["steps"]), 1)
    return {str(o["op"]): float(o["wait_ns"]) / steps for o in doc["collectives"]["by_op"]}


def _categories(a: dict[str, float], b: dict[str, float]) -> list[dict[str, Any]]:
    rows = [
        {
            "category": c,
            "ns_per_step_a": int(round(a.get(c, 0.0))),
            "ns_per_step_b": int(round(b.get(c, 0.0))),
            "delta_ns_per_step": int(round(b.get(c, 0.0) - a.get(c, 0.0))),
        }
        for c in sorted(set(a) | set(b))
    ]
    return sorted(rows, key=lambda r: -abs(r["delta_ns_per_step"]))


def job_diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The two jobs compared (see the module doc)."""
    ma, mb = _medians(a), _medians(b)
    ca, cb = _per_step(a), _per_step(b)
    ranks = []
    for r in sorted(set(ma) | set(mb)):
        va, vb = ma.get(r), mb.get(r)
        ranks.append(
            {
                "rank": r,
                "median_step_ns_a": va,
                "median_step_ns_b": vb,
                "delta_ns": None if va is None or vb is None else vb - va,
                "categories": _categories(ca.get(r, {}), cb.get(r, {}))
                if r in ca and r in cb
                else [],
            }
        )
    sa, sb = _straggler(a), _straggler(b)
    wa, wb = _wait_by_op(a), _wait_by_op(b)
    keys = ("mean_step_ns", "collective_wait_share", "straggler_share")
    return {
        "report": "job_diff",
        "a": a["run"],
        "b": b["run"],
        "summary": {k: {"a": a["summary"][k], "b": b["summary"][k]} for k in keys},
        "ranks": ranks,
        "straggler_a": sa,
        "straggler_b": sb,
        "straggler_changed": (sa or {}).get("rank") != (sb or {}).get("rank"),
        "collective_wait_by_op": [
            {
                "op": op,
                "wait_ns_per_step_a": int(round(wa.get(op, 0.0))),
                "wait_ns_per_step_b": int(round(wb.get(op, 0.0))),
            }
            for op in sorted(set(wa) | set(wb))
        ],
    }


def _signed(delta: float) -> str:
    return "0" if delta == 0 else ("+" if delta > 0 else "-") + fmt_ns(abs(delta))


def render_job_diff(d: dict[str, Any], fmt: str = "text") -> str:
    if fmt == "json":
        return json.dumps(d, indent=1) + "\n"
    if fmt != "text":
        raise UsageError(
            f"--format {fmt}: two jobs are compared as {' or '.join(JOB_DIFF_FORMATS)}"
        )
    s = d["summary"]
    step_a, step_b = s["mean_step_ns"]["a"], s["mean_step_ns"]["b"]
    lines = [
        f"Job diff: A = {d['a']}  B = {d['b']}",
        "",
        f"Mean step {fmt_ns(step_a)} -> {fmt_ns(step_b)} ({_signed(step_b - step_a)}); "
        f"time in collective waits {s['collective_wait_share']['a']:.0%} -> "
        f"{s['collective_wait_share']['b']:.0%} of the step.",
        f"Straggler: {_who(d['straggler_a'])} -> {_who(d['straggler_b'])}"
        + ("" if d["straggler_changed"] else " (unchanged)"),
        "",
        "rank  median step A  median step B  B - A      largest changes per step",
    ]
    for r in d["ranks"]:
        a, b, delta = r["median_step_ns_a"], r["median_step_ns_b"], r["delta_ns"]
        a_text = fmt_ns(a) if a is not None else "absent"
        b_text = fmt_ns(b) if b is not None else "absent"
        change = "" if delta is None else _signed(delta)
        moved = ", ".join(
            f"{c['category'].replace('_', ' ')} {_signed(c['delta_ns_per_step'])}"
            for c in r["categories"][:TOP_CATEGORIES]
            if c["delta_ns_per_step"] != 0
        )
        lines.append(f"{r['rank']:>4}  {a_text:>13}  {b_text:>13}  {change:<9}  {moved}")
    if d["collective_wait_by_op"]:
        lines += ["", "Wait in collectives per step (mean of ranks):"]
        lines += [
            f"  {o['op']}: {fmt_ns(o['wait_ns_per_step_a'])} -> {fmt_ns(o['wait_ns_per_step_b'])}"
            for o in d["collective_wait_by_op"]
        ]
    return "\n".join(lines) + "\n"


def _who(s: dict[str, Any] | None) -> str:
    if s is None:
        return "none"
    why = "; ".join(
        f"{c['what'].replace('_', ' ')} {fmt_ns(c['excess_ns_per_step'])}/step"
        + (f" at {c['file'].rsplit('/', 1)[-1]}:{c['line']}" if c["line"] >= 0 else "")
        for c in s["causes"]
    )
    return (
        f"rank {s['rank']} (the others wait for it {s['share']:.0%} of their step time"
        + (f"; {why}" if why else "")
        + ")"
    )
