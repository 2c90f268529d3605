"""Time axis: tick positions at 1-2-5 steps and labels in the unit that fits the zoom."""

from __future__ import annotations

import math

import numpy as np

_UNITS = ((1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "µs"), (1, "ns"))


def tick_step(span_ns: float, width_px: int, min_px: int = 90) -> int:
    """The 1-2-5 step in ns that puts ticks at least ``min_px`` pixels apart."""
    if span_ns <= 0 or width_px <= 0:
        return 1
    raw = span_ns * min_px / width_px
    exp = 10 ** math.floor(math.log10(max(raw, 1)))
    for m in (1, 2, 5, 10):
        if m * exp >= raw:
            return int(max(m * exp, 1))
    return int(10 * exp)


def ticks(t0: float, t1: float, width_px: int) -> tuple[np.ndarray, int]:
    """Tick times (ns) inside [t0, t1] and the step between them."""
    step = tick_step(t1 - t0, width_px)
    first = math.ceil(t0 / step) * step
    return np.arange(first, t1 + 1, step, dtype=np.float64), step


def unit_for(step_ns: float) -> tuple[int, str]:
    """The largest unit in which the step is at least 1."""
    for scale, name in _UNITS:
        if step_ns >= scale:
            return scale, name
    return 1, "ns"


def format_time(t_ns: float, step_ns: float, top_ns: float | None = None) -> str:
    """A tick label: ``t_ns`` in the unit of the axis' largest value ``top_ns`` (``3.5 s``,
    not ``3500 ms``, at a 500 ms step), with just enough decimals to tell ticks apart.
    Without ``top_ns``, in the step's unit."""
    scale, name = unit_for(max(step_ns, abs(top_ns or 0)))
    value = t_ns / scale
    step_in_unit = step_ns / scale
    decimals = max(0, -math.floor(math.log10(step_in_unit))) if step_in_unit < 1 else 0
    if value == 0:
        value = 0.0  # never "-0.0 s"
    return f"{value:.{decimals}f} {name}"


#: Ticks switch to labels relative to a reference once absolute labels would need this many
#: steps' worth of digits (``210850 µs`` at a 20 µs step): Perfetto's ``+12.345 µs``.
RELATIVE_AFTER_STEPS = 1000


def reference(t0: float, t1: float, step_ns: float) -> float | None:
    """The time tick labels count from at deep zoom (the tick at or before the view start,
    never before the trace start at 0), or ``None`` when absolute labels stay short."""
    if step_ns <= 0 or max(abs(t0), abs(t1)) / step_ns < RELATIVE_AFTER_STEPS:
        return None
    return max(math.floor(t0 / step_ns) * step_ns, 0.0)


def format_offset(t_ns: float, step_ns: float) -> str:
    """An absolute time, once, to the step's precision in the unit of the time itself:
    ``210.85 ms`` for 210 850 000 ns at a 20 µs step."""
    scale, name = unit_for(abs(t_ns))
    decimals = min(max(math.ceil(math.log10(scale / step_ns)), 0), 9) if step_ns < scale else 0
    return f"{t_ns / scale:.{decimals}f} {name}"


def tick_label(t_ns: float, step_ns: float, ref: float | None, top_ns: float | None = None) -> str:
    """A tick's label: absolute, or ``+x unit`` from ``ref``; ``top_ns`` is the axis'
    largest time (absolute), which chooses the unit."""
    if ref is None:
        return format_time(t_ns, step_ns, top_ns)
    return "+" + format_time(t_ns - ref, step_ns, None if top_ns is None else top_ns - ref)


def labelled_ticks(t0: float, t1: float, width_px: int) -> tuple[np.ndarray, int, float | None]:
    """The ticks an axis over [t0, t1] labels — none before the trace start (time 0), so
    a view that shows a margin before it (a search jump to the first event) never reads a
    negative time — their step, and the reference of relative labels (or None)."""
    times, step = ticks(t0, t1, width_px)
    return times[times >= 0], step, reference(t0, t1, step)
