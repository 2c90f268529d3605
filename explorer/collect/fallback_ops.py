"""Operators that left the accelerator for the CPU, found in the profiler's own events.

PyTorch's generic CPU fallback (``at::native::cpu_fallback``, used by PrivateUse1 backends,
XLA and MPS) moves an operator's inputs with ``at::_to_cpu``, runs the CPU kernel and copies
the results back. The profiler records that as an ``aten::_to_cpu`` op *nested inside* the
operator that fell back — a signature that needs no backend cooperation and no per-op hook.
For every ``aten::_to_cpu`` we emit an ``explorer_fallback`` slice exactly over its enclosing
operator, so the analysis counts it like a fallback announced by a warning.

The profiler knows only the *function* a Python op ran in (its frames are named by their
first line); the backend's warning knows the *line* (Python's ``warnings`` point at the
caller). A warning is shown once per op and line, so the op's later calls have no warning
of their own: when every warning about an op names one and the same user line, the op's
fallback slices take that line. An op warned at two lines keeps its frame: we do not guess.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from explorer.trace.kinds import FALLBACK_MARKER, FALLBACK_PLUMBING


def fallback_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``explorer_fallback`` slices (µs timestamps, like ``events``) for ops that ran via the
    CPU fallback. One pass to find the markers; the enclosing-op search runs only on the
    threads that have one (a run without fallbacks pays a single list scan)."""
    markers = [e for e in events if e.get("name") == FALLBACK_MARKER and e.get("ph") == "X"]
    if not markers:
        return []
    threads = {(m.get("pid"), m.get("tid")) for m in markers}
    ops: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if (
            e.get("ph") == "X"
            and e.get("cat") == "cpu_op"
            and (e.get("pid"), e.get("tid")) in threads
        ):
            if e.get("name") not in FALLBACK_PLUMBING:
                ops[(e.get("pid"), e.get("tid"))].append(e)
    out: list[dict[str, Any]] = []
    seen: set[int] = set()
    for key, candidates in ops.items():
        ts = np.array([c["ts"] for c in candidates], dtype=float)
        end = ts + np.array([c.get("dur", 0.0) for c in candidates], dtype=float)
        for m in (m for m in markers if (m.get("pid"), m.get("tid")) == key):
            m_ts, m_end = float(m["ts"]), float(m["ts"]) + float(m.get("dur", 0.0))
            inside = np.flatnonzero((ts <= m_ts) & (end >= m_end))
            if inside.size == 0:
                continue
            # the innermost enclosing op: the latest start, then (same µs) the earliest end
            i = int(inside[np.lexsort((end[inside], -ts[inside]))[0]])
            if i in seen:  # one op moves several inputs: one fallback
                continue
            seen.add(i)
            op = candidates[i]
            out.append(
                {
                    "ph": "X",
                    "cat": "explorer_fallback",
                    "name": f"CPU fallback {op['name']}",
                    "pid": op.get("pid"),
                    "tid": op.get("tid"),
                    "ts": op["ts"],
                    "dur": op.get("dur", 0.0),
                    "args": {"op": op["name"], "device": "", "via": f"profiler:{FALLBACK_MARKER}"},
                }
            )
    _lines_from_warnings(events, out)
    return out


_SOURCE_KEYS = ("source_file", "source_line", "source_function")


def _lines_from_warnings(events: list[dict[str, Any]], found: list[dict[str, Any]]) -> None:
    """Give each found fallback the user line its op's warnings name, when they name one."""
    lines: dict[str, set[tuple[Any, ...]]] = defaultdict(set)
    for e in events:
        args = e.get("args") or {}
        if e.get("cat") == "explorer_fallback" and args.get("op") and args.get("source_file"):
            lines[str(args["op"])].add(tuple(args.get(k) for k in _SOURCE_KEYS))
    for f in found:
        known = lines.get(f["args"]["op"], set())
        if len(known) == 1:
            f["args"].update(zip(_SOURCE_KEYS, next(iter(known)), strict=True))
