"""The per-step breakdown as stacked bars: one bar per step, one panel per device.

Draws :func:`explorer.analysis.breakdown.breakdown` as it is: each bar's segments are the
step's categories, so a bar is as tall as the step (the categories add up to the step's
attributed time exactly), the number the report's per-step table shows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.analysis.breakdown import CATEGORIES
from explorer.palette import CATEGORY_COLORS, CATEGORY_LABELS
from explorer.plot.figure import Figure, new_figure, time_unit

#: Past this many steps the x axis labels every n-th step only.
MAX_TICKS = 30


def breakdown_figure(bd: pd.DataFrame, steps: pd.DataFrame) -> Figure:
    """``bd``: the long breakdown ``[step, device, category, ns]``; ``steps``: the steps
    table it was computed over (``step``, ``partial``), in order."""
    devices = sorted(bd["device"].astype(str).unique()) if len(bd) else []
    numbers = [int(s) for s in steps["step"]]
    partial = {int(s) for s, p in zip(steps["step"], steps["partial"], strict=True) if p}
    fig = new_figure(
        max(6.0, min(14.0, 2.0 + 0.35 * len(numbers))), 1.0 + 2.6 * max(1, len(devices))
    )
    if not devices:
        ax = fig.add_subplot()
        ax.set_axis_off()
        ax.text(0.5, 0.5, "No steps to break down in this trace.", ha="center", va="center")
        return fig
    wide = (
        bd.pivot_table(
            index=["device", "step"], columns="category", values="ns", aggfunc="sum", observed=False
        )
        .reindex(columns=list(CATEGORIES))
        .fillna(0)
        .astype(np.int64)
    )
    scale, unit = time_unit(float(wide.sum(axis=1).max()))
    axes = fig.subplots(len(devices), 1, sharex=True, squeeze=False)[:, 0]
    x = np.arange(len(numbers))
    for ax, dev in zip(axes, devices, strict=True):
        per_step = wide.loc[dev].reindex(numbers, fill_value=0)
        bottom = np.zeros(len(numbers))
        for cat in CATEGORIES:
            ns = per_step[cat].to_numpy(np.int64)
            shown = ns / scale
            bars = ax.bar(
                x, shown, bottom=bottom, width=0.8, color=CATEGORY_COLORS[cat],
                label=CATEGORY_LABELS[cat], gid=f"category:{cat}",
            )  # fmt: skip
            for i, patch in enumerate(bars.patches):
                if numbers[i] in partial and ns[i] > 0:
                    patch.set_hatch("//")
                    patch.set_alpha(0.55)
            bottom += shown
        ax.set_ylabel(f"time ({unit})")
        ax.set_title(f"Step time by category — {dev}", loc="left", fontsize=11)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    every = max(1, int(np.ceil(len(numbers) / MAX_TICKS)))
    ticks = x[::every]
    axes[-1].set_xticks(ticks)
    axes[-1].set_xticklabels(
        [f"{numbers[i]}\n(partial)" if numbers[i] in partial else str(numbers[i]) for i in ticks]
    )
    axes[-1].set_xlabel("step")
    used = {c for c in CATEGORIES if int(wide[c].sum())}
    handles, labels = axes[0].get_legend_handles_labels()
    keep = [i for i, c in enumerate(CATEGORIES) if c in used]
    fig.legend(
        [handles[i] for i in keep], [labels[i] for i in keep],
        loc="outside right upper", fontsize=9, frameon=False,
    )  # fmt: skip
    return fig
