"""Traces of any size for benchmarks, written fast: one simulated step, repeated as text.

A jitter-free simulation of the scenario reaches a steady state after a step or two, where
every step writes the same events with every number shifted by a constant: timestamps by
the step period, ids (External id, correlation, flow ids, Python ids), addresses and
``ProfilerStep#N`` by their own per-step increments. :func:`write_large` learns those
increments by comparing steps 2 and 3 field by field, turns step 2 into one ``%``-format
string with a placeholder per varying number, computes the numbers of all steps as one
numpy array, and formats a step per call — so the per-event work happens inside C string
formatting, streamed to disk in chunks.
"""

from __future__ import annotations

import gzip
import json
import re
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np

from explorer.scenarios.document import (
    BASE_TIME_NANOSECONDS,
    DEVICE_PROPERTIES,
    metadata_events,
    profiler_span,
)
from explorer.scenarios.simulator import HOST_PID, MAIN_TID, us
from explorer.scenarios.workload import LINES, TRAIN_FILE

_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
_TEMPLATE_STEP = 2
_CHUNK_STEPS = 64


class _Template:
    """Step 2's events as format strings plus (base, delta) of every varying number."""

    def __init__(self) -> None:
        self.base: list[int] = []
        self.delta: list[int] = []
        self.is_time: list[bool] = []

    def var(self, base: int, delta: int, is_time: bool) -> str:
        self.base.append(int(base))
        self.delta.append(int(delta))
        self.is_time.append(is_time)
        return f"@@V{len(self.base) - 1}@@"

    def skeleton(self, a: Any, b: Any, key: str = "") -> Any:
        """``a`` with every number that differs from ``b`` replaced by a placeholder."""
        if isinstance(a, dict):
            return {k: self.skeleton(v, b.get(k), k) for k, v in a.items()}
        if isinstance(a, list):
            return [self.skeleton(x, y, key) for x, y in zip(a, b, strict=True)]
        if key == "ts" and isinstance(a, float):
            na, nb = round(a * 1000), round(b * 1000)
            return self.var(na, nb - na, True) if na != nb else a
        if isinstance(a, int) and not isinstance(a, bool) and isinstance(b, int) and a != b:
            return self.var(a, b - a, False)
        if isinstance(a, str) and isinstance(b, str) and a != b:
            ma, mb = _STEP_NAME.match(a), _STEP_NAME.match(b)
            if ma and mb:
                return "ProfilerStep#" + self.var(int(ma[1]), int(mb[1]) - int(ma[1]), False)
        return a


def _step_events(sim: Any, step: int) -> list[dict[str, Any]]:
    return [e for e, s in zip(sim.events, sim.event_step, strict=True) if s == step]


def build_template(scenario: str, seed: int = 0) -> tuple[str, _Template, int, int, int, int]:
    """(format string of one step, its numbers, events per step, step period in ns, and the
    first start and last end of the template step's events)."""
    from explorer.scenarios import simulate

    sim = simulate(scenario, steps=_TEMPLATE_STEP + 2, seed=seed, jitter=0.0)
    a = _step_events(sim, _TEMPLATE_STEP)
    b = _step_events(sim, _TEMPLATE_STEP + 1)
    if len(a) != len(b) or any(
        x.get("name") != y.get("name") and not _STEP_NAME.match(str(x.get("name")))
        for x, y in zip(a, b, strict=False)
    ):
        raise ValueError(f"scenario {scenario!r} has no steady step to repeat")
    t = _Template()
    parts = []
    for x, y in zip(a, b, strict=True):
        text = json.dumps(t.skeleton(x, y), separators=(",", ":")).replace("%", "%%")
        parts.append(text)
    fmt = ",\n".join(parts)
    for j, is_time in enumerate(t.is_time):
        spec = "%d.%03d" if is_time else "%d"
        fmt = fmt.replace(f'"@@V{j}@@"', spec).replace(f"@@V{j}@@", spec)
    step_start = [e for e in a if _STEP_NAME.match(str(e.get("name", "")))][0]
    step_next = [e for e in b if _STEP_NAME.match(str(e.get("name", "")))][0]
    period = round(step_next["ts"] * 1000) - round(step_start["ts"] * 1000)
    first = min(round(e["ts"] * 1000) for e in a)
    last = max(round((e["ts"] + e.get("dur", 0.0)) * 1000) for e in a)
    return fmt, t, len(a), period, first, last


def _values(t: _Template, steps: np.ndarray) -> np.ndarray:
    """The numbers of every step, (len(steps), n_fields), times split into µs and ns parts."""
    base = np.asarray(t.base, np.int64)
    delta = np.asarray(t.delta, np.int64)
    v = base[None, :] + (steps[:, None] - _TEMPLATE_STEP) * delta[None, :]
    is_time = np.asarray(t.is_time, bool)
    cols = []
    for j in range(v.shape[1]):  # one column per varying field of the template step
        if is_time[j]:
            cols.extend([v[:, j] // 1000, v[:, j] % 1000])
        else:
            cols.append(v[:, j])
    return np.stack(cols, 1) if cols else np.zeros((len(steps), 0), np.int64)


def write_large(
    path: str | PathLike[str], n_events: int = 1_000_000, scenario: str = "clean", seed: int = 0
) -> Path:
    """Write a Kineto JSON trace of at least ``n_events`` events: ``scenario``'s steady step
    repeated, numbered ``ProfilerStep#0...``, gzip-compressed (fast level) for ``.gz`` names.

    The top level says ``"synthetic": true`` and ``explorer_scenario.large: true``;
    ``explorer_injected`` carries the steady step's injected amount times the number of
    steps (empty for ``clean``, and for ``compile_pause`` whose compile is not in the
    repeated step).
    """
    from explorer.scenarios import SCENARIOS, simulate

    path = Path(path)
    fmt, t, per_step, period, first, last = build_template(scenario, seed)
    n_steps = max(1, -(-int(n_events) // per_step))
    start_ns = first - _TEMPLATE_STEP * period - 100_000
    end_ns = last + (n_steps - 1 - _TEMPLATE_STEP) * period + 100_000
    injected = _injected(scenario, seed, n_steps, SCENARIOS, simulate)
    header = {
        "schemaVersion": 1, "deviceProperties": DEVICE_PROPERTIES, "record_shapes": 1,
        "with_stack": 1, "profile_memory": 1, "traceName": f"synthetic:{scenario}:large",
        "displayTimeUnit": "ms", "baseTimeNanoseconds": BASE_TIME_NANOSECONDS, "synthetic": True,
        "explorer_scenario": {"name": scenario, "steps": n_steps, "seed": seed, "scale": 1,
                              "large": True, "events_per_step": per_step},
        "explorer_injected": injected,
    }  # fmt: skip
    roots = [
        _frame("<module>", 1, None, start_ns + 10_000, end_ns),
        _frame("train", 2, 1, start_ns + 20_000, end_ns - 10_000),
    ]
    prefix = metadata_events(start_ns) + roots
    suffix = profiler_span(start_ns, end_ns + 50_000)
    opener = (
        gzip.open(path, "wb", compresslevel=1) if path.name.endswith(".gz") else open(path, "wb")
    )
    with opener as f:
        head = json.dumps(header, separators=(",", ":"))[:-1] + ',"traceEvents":[\n'
        f.write(head.encode())
        f.write(",\n".join(json.dumps(e, separators=(",", ":")) for e in prefix).encode())
        for lo in range(0, n_steps, _CHUNK_STEPS):  # one iteration per chunk of steps
            ks = np.arange(lo, min(lo + _CHUNK_STEPS, n_steps), dtype=np.int64)
            rows = _values(t, ks).tolist()
            f.write("".join(",\n" + fmt % tuple(r) for r in rows).encode())
        f.write((",\n" + ",\n".join(json.dumps(e) for e in suffix) + "\n]}").encode())
    return path


def _frame(function: str, pid: int, parent: int | None, start: int, end: int) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "python_function",
        "name": f"{TRAIN_FILE}({LINES[function]}): {function}",
        "pid": HOST_PID,
        "tid": MAIN_TID,
        "ts": us(start),
        "dur": us(end - start),
        "args": {"Python parent id": parent, "Python id": pid},
    }


def _injected(
    scenario: str, seed: int, n_steps: int, catalog: Any, simulate: Any
) -> list[dict[str, Any]]:
    sc = catalog[scenario]
    if not sc.truths:
        return []
    sim = simulate(scenario, steps=_TEMPLATE_STEP + 2, seed=seed, jitter=0.0)
    found = []
    for truth in sc.truths:
        entry = truth(sim)
        per = dict((int(s), int(v)) for s, v in entry.get("per_step", []))
        if _TEMPLATE_STEP not in per and entry["kind"] != "memory":
            continue
        out = {k: v for k, v in entry.items() if k not in ("per_step", "ranges")}
        out["time_lost_ns"] = per.get(_TEMPLATE_STEP, 0) * n_steps
        out["steps"] = list(range(n_steps))
        out["definition"] = f"{entry['definition']} (the steady step's amount × {n_steps} steps)"
        found.append(out)
    return found
