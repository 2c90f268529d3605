"""A job's rank × step heatmap: step time per rank and step, from the job report
document's ``step_matrix`` (the numbers the job report prints), the straggler's row
marked."""

from __future__ import annotations

from typing import Any

import numpy as np

from explorer.plot.figure import Figure, new_figure, time_unit
from explorer.units import fmt_ns

#: Cells are labelled with their time up to this many cells.
MAX_LABELLED = 200


def matrix_of(doc: dict[str, Any]) -> tuple[list[int], list[int], np.ndarray]:
    """Ranks, steps and the ``ranks × steps`` step times in ns (NaN: the rank has no such
    step) of a job report document."""
    ranks = sorted(int(r) for r in doc["step_matrix"])
    steps = [int(s) for s in doc["steps"]]
    values = np.array(
        [[np.nan if v is None else float(v) for v in doc["step_matrix"][str(r)]] for r in ranks],
        dtype=float,
    ).reshape(len(ranks), len(steps))
    return ranks, steps, values


def heatmap_figure(doc: dict[str, Any]) -> Figure:
    """Rows are ranks, columns steps, colour the step time (darker: slower)."""
    ranks, steps, values = matrix_of(doc)
    fig = new_figure(max(5.0, min(14.0, 2.5 + 0.6 * len(steps))), 1.4 + 0.42 * max(len(ranks), 1))
    ax = fig.add_subplot()
    if values.size == 0 or np.isnan(values).all():
        ax.set_axis_off()
        ax.text(0.5, 0.5, "No step times in this job.", ha="center", va="center")
        return fig
    scale, unit = time_unit(float(np.nanmax(values)))
    image = ax.imshow(np.ma.masked_invalid(values / scale), cmap="viridis_r", aspect="auto",
                      interpolation="nearest")  # fmt: skip
    image.set_gid("step_matrix")
    fig.colorbar(image, ax=ax, label=f"step time ({unit})")
    ax.set_xticks(np.arange(len(steps)), [str(s) for s in steps])
    straggler = (doc.get("straggler") or {}).get("rank")
    ax.set_yticks(
        np.arange(len(ranks)),
        [f"rank {r} (straggler)" if r == straggler else f"rank {r}" for r in ranks],
    )
    if straggler in ranks:
        ax.get_yticklabels()[ranks.index(straggler)].set_color("#d9453d")
    ax.set_xlabel("step")
    ax.set_title("Step time per rank and step", loc="left", fontsize=11)
    if values.size <= MAX_LABELLED:
        mid = np.nanmean(values)
        for i in range(len(ranks)):
            for j in range(len(steps)):
                if not np.isnan(values[i, j]):
                    ax.text(j, i, fmt_ns(values[i, j]), ha="center", va="center", fontsize=7,
                            color="white" if values[i, j] > mid else "black")  # fmt: skip
    return fig
