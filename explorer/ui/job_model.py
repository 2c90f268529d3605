"""What the job overview shows, from the job report document and the job's store: no Qt.

The window (:mod:`explorer.ui.job_window`) only draws these:

* :func:`heatmap` — a rank × step matrix of nanoseconds: the step time
  (``doc["step_matrix"]``), or one breakdown category's time in each step of each rank
  (:func:`step_categories`, summed over the rank's devices, as the report's per-rank
  breakdown is);
* :func:`collectives_frame` — the report's collectives rows as a table;
* :func:`aligned_shifts` — where each rank's own clock sits on the job's aligned clock, for
  the stacked timelines.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from explorer.job.rank_map import rank_dir
from explorer.job.reduce import open_job_tables

#: The heatmap's default quantity: the step time itself.
STEP_TIME = "step time"


@dataclass(frozen=True)
class Heatmap:
    """``values[i, j]``: nanoseconds of ``ranks[i]`` in step ``steps[j]`` (NaN: no such step)."""

    ranks: list[int]
    steps: list[int]
    values: np.ndarray
    quantity: str


def step_categories(doc: dict[str, Any]) -> pd.DataFrame:
    """``rank, step, category, ns`` from the ranks' stored per-step breakdown (DuckDB over
    the Parquet files the map step wrote), summed over each rank's devices."""
    store = Path(doc["store"])
    con = open_job_tables([rank_dir(store, int(r["rank"])) for r in doc["ranks"]])
    try:
        return con.execute(
            """SELECT rank, step, category, sum(ns)::BIGINT AS ns FROM breakdown
               GROUP BY rank, step, category ORDER BY rank, step, category"""
        ).df()
    finally:
        con.close()


def categories(per_step: pd.DataFrame) -> list[str]:
    """The categories with any time, most time first."""
    total = per_step.groupby("category")["ns"].sum()
    total = total[total > 0].sort_values(ascending=False, kind="stable")
    return [str(c) for c in total.index]


def heatmap(doc: dict[str, Any], quantity: str = STEP_TIME, per_step: Any = None) -> Heatmap:
    """The rank × step matrix of ``quantity``: :data:`STEP_TIME` or a category of
    ``per_step`` (:func:`step_categories`); a rank's step without that category is 0."""
    ranks = sorted(int(r) for r in doc["step_matrix"])
    steps = [int(s) for s in doc["steps"]]
    if quantity == STEP_TIME:
        values = np.array(
            [
                [np.nan if v is None else float(v) for v in doc["step_matrix"][str(r)]]
                for r in ranks
            ],
            dtype=np.float64,
        ).reshape(len(ranks), len(steps))
        return Heatmap(ranks, steps, values, quantity)
    if per_step is None:
        raise ValueError(f"{quantity!r} needs the per-step breakdown")
    mine = per_step[per_step["category"] == quantity]
    grid = (
        mine.pivot_table(index="rank", columns="step", values="ns", aggfunc="sum")
        .reindex(index=ranks, columns=steps)
        .fillna(0.0)
    )
    # a step the rank does not have stays missing, as in the step-time matrix
    absent = np.isnan(heatmap(doc).values)
    values = grid.to_numpy(np.float64, copy=True)
    values[absent] = np.nan
    return Heatmap(ranks, steps, values, quantity)


#: The collectives table: (document field, column title, format) in display order; a format
#: is a :data:`explorer.ui.dataframe_model.FORMATS` key, or ``"3g"``: three significant digits.
COLLECTIVE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("op", "op", ""),
    ("step", "step", "int"),
    ("bytes", "bytes", "bytes"),
    ("skew_ns", "skew", "ns"),
    ("wait_ns", "wait", "ns"),
    ("transfer_ns", "transfer", "ns"),
    ("last_rank", "last rank", "int"),
    ("caused_wait_ns", "caused wait", "ns"),
    ("busbw_gbps", "bus bw", "gbps"),
    ("key", "key", ""),
)


def collectives_frame(doc: dict[str, Any]) -> pd.DataFrame:
    """The report's collective rows (the 200 that made ranks wait most), in time order;
    unknown sizes (-1) are missing."""
    rows = doc["collectives"]["rows"]
    frame = pd.DataFrame(rows, columns=[c for c, _, _ in COLLECTIVE_COLUMNS])
    frame["bytes"] = frame["bytes"].where(frame["bytes"] >= 0)
    frame["step"] = frame["step"].astype("Float64")
    return frame


def aligned_shifts(start_ns: dict[int, int], doc: dict[str, Any]) -> dict[int, int]:
    """Per rank: add to its trace's ``ts`` to place it on the job's aligned clock, counted
    from the earliest of these ranks. A rank's absolute time is its ``metadata["start_ns"]``
    plus ``ts``; alignment subtracts its ``clock_offset_ns`` (the report's rule)."""
    offset = {int(r["rank"]): int(r["clock_offset_ns"]) for r in doc["ranks"]}
    aligned = {r: int(s) - offset.get(r, 0) for r, s in start_ns.items()}
    origin = min(aligned.values(), default=0)
    return {r: a - origin for r, a in aligned.items()}
