"""``explorer diff RUN_A RUN_B``: two jobs compared rank by rank.

Works on two job report documents (:func:`explorer.job.job_document`): each rank's median
step time in A and B (from the rank × step matrix) and the straggler before and after (which
rank, and the share of the other ranks' step time lost waiting for it).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from explorer.errors import UsageError
from explorer.units import fmt_ns

JOB_DIFF_FORMATS: tuple[str, ...] = ("text", "json")


def _medians(doc: dict[str, Any]) -> dict[int, int | None]:
    out: dict[int, int | None] = {}
    for rank, row in doc["step_matrix"].items():
        steps = [v for v in row if v is not None]
        out[int(rank)] = int(np.median(steps)) if steps else None
    return out


def _straggler(doc: dict[str, Any]) -> dict[str, Any] | None:
    s = doc["straggler"]
    return None if s is None else {"rank": int(s["rank"]), "share": float(s["share"])}


def job_diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Per rank (of either job): median step time in A and B and B − A; the stragglers."""
    ma, mb = _medians(a), _medians(b)
    ranks = []
    for r in sorted(set(ma) | set(mb)):
        va, vb = ma.get(r), mb.get(r)
        ranks.append(
            {
                "rank": r,
                "median_step_ns_a": va,
                "median_step_ns_b": vb,
                "delta_ns": None if va is None or vb is None else vb - va,
            }
        )
    sa, sb = _straggler(a), _straggler(b)
    return {
        "report": "job_diff",
        "a": a["run"],
        "b": b["run"],
        "ranks": ranks,
        "straggler_a": sa,
        "straggler_b": sb,
        "straggler_changed": (sa or {}).get("rank") != (sb or {}).get("rank"),
    }


def render_job_diff(d: dict[str, Any], fmt: str = "text") -> str:
    if fmt == "json":
        return json.dumps(d, indent=1) + "\n"
    if fmt != "text":
        raise UsageError(
            f"--format {fmt}: two jobs are compared as {' or '.join(JOB_DIFF_FORMATS)}"
        )
    lines = [
        f"Job diff: A = {d['a']}  B = {d['b']}",
        "",
        "rank  median step A  median step B  B - A",
    ]
    for r in d["ranks"]:
        a, b, delta = r["median_step_ns_a"], r["median_step_ns_b"], r["delta_ns"]
        change = (
            "" if delta is None else "0" if delta == 0 else f"{delta:+d}"[0] + fmt_ns(abs(delta))
        )
        a_text = fmt_ns(a) if a is not None else "absent"
        b_text = fmt_ns(b) if b is not None else "absent"
        lines.append(f"{r['rank']:>4}  {a_text:>13}  {b_text:>13}  {change}")
    lines.append("")
    lines.append(f"Straggler: {_who(d['straggler_a'])} -> {_who(d['straggler_b'])}"
                 + ("" if d["straggler_changed"] else " (unchanged)"))  # fmt: skip
    return "\n".join(lines) + "\n"


def _who(s: dict[str, Any] | None) -> str:
    return (
        "none"
        if s is None
        else f"rank {s['rank']} (the others wait for it {s['share']:.0%} of their step time)"
    )
