"""The critical path's composition: its categories as one bar that adds up to the path's
length, and the ops that hold most of it. Draws a
:class:`~explorer.analysis.critical_path.CriticalPath` as it is (the report's section)."""

from __future__ import annotations

import numpy as np

from explorer.analysis.critical_path import CriticalPath
from explorer.palette import CRITICAL_PATH_COLORS, CRITICAL_PATH_LABELS, KIND_COLORS, UNKNOWN
from explorer.plot.figure import Figure, new_figure, time_unit
from explorer.units import fmt_ns

#: Ops shown under the bar.
TOP_OPS = 10
#: Characters of an op name on the axis (the full name is in ``top_ops``).
NAME_CHARS = 48


def critical_path_figure(cp: CriticalPath) -> Figure:
    """One horizontal bar of the path's categories (nonzero ones, in path order) and a
    bar per top op (time it holds on the path), coloured by the op's kind as on the
    viewer's timeline."""
    ops = cp.top_ops.head(TOP_OPS)
    fig = new_figure(10.0, 2.2 + 0.32 * max(len(ops), 1))
    top, bottom = fig.subplots(2, 1, height_ratios=[1, max(len(ops), 1) * 0.6 + 0.6])
    length = int(cp.length_ns)
    fig.suptitle(f"Critical path of {cp.scope}: {fmt_ns(length)}", x=0.01, ha="left", fontsize=11)
    scale, unit = time_unit(float(length))
    left = 0.0
    for r in cp.summary.itertuples(index=False):
        ns = int(r.ns)
        if ns <= 0:
            continue
        cat = str(r.category)
        top.barh([0], [ns / scale], left=left, color=CRITICAL_PATH_COLORS.get(cat, UNKNOWN),
                 label=f"{CRITICAL_PATH_LABELS.get(cat, cat)} {100 * ns / length:.1f}%",
                 gid=f"path:{cat}")  # fmt: skip
        left += ns / scale
    top.set_yticks([])
    top.set_xlim(0, max(left, 1e-12))
    top.set_xlabel(f"time on the path ({unit})")
    if left:
        top.legend(loc="upper left", bbox_to_anchor=(1.0, 1.3), fontsize=8, frameon=False)
    if len(ops) == 0:
        bottom.set_axis_off()
        bottom.text(0.5, 0.5, "No ops on the path.", ha="center", va="center")
        return fig
    o_scale, o_unit = time_unit(float(ops["ns"].max()))
    y = np.arange(len(ops))
    names = [
        n if len(n) <= NAME_CHARS else n[: NAME_CHARS - 1] + "…" for n in ops["name"].astype(str)
    ]
    colors = [KIND_COLORS.get(str(k), UNKNOWN) for k in ops["kind"]]  # the op's kind's colour
    bottom.barh(y, ops["ns"].to_numpy(np.int64) / o_scale, color=colors, gid="top_ops")
    bottom.set_yticks(y)
    bottom.set_yticklabels(names, fontsize=8)
    bottom.invert_yaxis()
    bottom.set_xlabel(f"time the op holds on the path ({o_unit})")
    bottom.grid(axis="x", alpha=0.3)
    return fig
