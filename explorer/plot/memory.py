"""Memory over trace time: allocated (solid) and reserved (dashed) per device, the peak
marked, the steps shaded. Draws :func:`explorer.analysis.memory.memory_timeline` and
:func:`~explorer.analysis.memory.peaks` as they are (the report's memory figures)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.palette import KIND_COLORS
from explorer.plot.figure import Figure, byte_unit, new_figure, time_unit
from explorer.units import fmt_bytes, fmt_ns

NO_MEMORY = (
    "No memory events in this trace: record with "
    "torch.profiler's profile_memory=True (explorer.collect records them)."
)
_COLORS = ("#2e6fd8", "#8e5cc4", "#e69138", "#57a773", "#d9453d", "#45a5a3")


def memory_figure(timeline: pd.DataFrame, peaks: pd.DataFrame, steps: pd.DataFrame) -> Figure:
    """``timeline``: ``[device, ts, allocated, reserved]``; ``peaks``: ``[device,
    peak_bytes, ts]``; ``steps``: the steps table (``start_ns``, ``end_ns``) to shade."""
    fig = new_figure(10.0, 4.0)
    ax = fig.add_subplot()
    if len(timeline) == 0:
        ax.set_axis_off()
        ax.text(0.5, 0.5, NO_MEMORY, ha="center", va="center", wrap=True)
        return fig
    t_scale, t_unit = time_unit(float(timeline["ts"].max()))
    b_scale, b_unit = byte_unit(float(max(timeline["allocated"].max(), timeline["reserved"].max())))
    for i, row in enumerate(steps.itertuples(index=False)):
        if i % 2 == 0:
            ax.axvspan(row.start_ns / t_scale, row.end_ns / t_scale, color="#eef1f4", zorder=0)
    for i, (dev, g) in enumerate(timeline.groupby("device", sort=True)):
        color = _COLORS[i % len(_COLORS)]
        ts = g["ts"].to_numpy(np.int64) / t_scale
        ax.step(ts, g["reserved"].to_numpy(np.int64) / b_scale, where="post", color=color,
                linestyle="--", linewidth=1, label=f"{dev} reserved", gid=f"reserved:{dev}")  # fmt: skip
        ax.step(ts, g["allocated"].to_numpy(np.int64) / b_scale, where="post", color=color,
                linewidth=1.5, label=f"{dev} allocated", gid=f"allocated:{dev}")  # fmt: skip
    for r in peaks.itertuples(index=False):
        x, y = r.ts / t_scale, r.peak_bytes / b_scale
        ax.plot([x], [y], marker="v", color=KIND_COLORS["sync"], gid=f"peak:{r.device}")
        ax.annotate(
            f"peak {fmt_bytes(r.peak_bytes)} at {fmt_ns(r.ts)}", (x, y),
            textcoords="offset points", xytext=(6, 6), fontsize=9,
        )  # fmt: skip
    ax.set_xlabel(f"trace time ({t_unit})")
    ax.set_ylabel(f"memory ({b_unit})")
    ax.set_ylim(bottom=0)
    ax.margins(y=0.15)
    ax.set_title("Memory (steps shaded alternately)", loc="left", fontsize=11)
    ax.legend(fontsize=9, frameon=False, loc="upper left")
    return fig
