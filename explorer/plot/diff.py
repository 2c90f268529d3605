"""Two runs' step time by category, before above after: the diff's ``breakdown`` table
(:class:`~explorer.analysis.diff.TraceDiff`) drawn as it is."""

from __future__ import annotations

import pandas as pd

from explorer.palette import CATEGORY_COLORS, CATEGORY_LABELS, UNKNOWN
from explorer.plot.figure import Figure, new_figure, time_unit


def diff_figure(breakdown: pd.DataFrame) -> Figure:
    """``breakdown``: ``category, a_ns, b_ns`` (the median step's categories per side)."""
    fig = new_figure(9.0, 2.4)
    ax = fig.add_subplot()
    scale, unit = time_unit(float(max(breakdown["a_ns"].sum(), breakdown["b_ns"].sum(), 1)))
    left = {"a": 0.0, "b": 0.0}
    for r in breakdown.itertuples(index=False):
        cat = str(r.category)
        for row, side in ((1, "a"), (0, "b")):
            ns = int(getattr(r, f"{side}_ns"))
            ax.barh([row], [ns / scale], left=left[side], color=CATEGORY_COLORS.get(cat, UNKNOWN),
                    label=CATEGORY_LABELS.get(cat, cat) if side == "a" and (r.a_ns or r.b_ns) else None,
                    gid=f"{side}:{cat}")  # fmt: skip
            left[side] += ns / scale
    ax.set_yticks([1, 0], ["a (before)", "b (after)"])
    ax.set_xlabel(f"median step ({unit})")
    ax.set_title("Step time by category, before and after", loc="left", fontsize=11)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0),
              fontsize=8, frameon=False)  # fmt: skip
    return fig
