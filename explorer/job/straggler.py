"""Who holds the job back, in which steps, what it costs the others, and why.

In a synchronous job every rank's step takes about as long as the slowest rank's: the fast
ranks spend the difference waiting inside collectives. So the straggler is not the rank
with the longest steps. Nor is it simply the rank that enters collectives last: a rank
held up by the straggler in one collective (the root of DDP's buffer broadcast, waiting
for a late receiver) then enters the next collective late too, and the last-entry
count blames it for waits it did not cause. The straggler is the rank with the most time
of its own — step time outside collective waits (:func:`rank_busy`) — beyond the other
ranks': that is the time the others spend waiting for it, wherever the wait lands.

Ranks are compared by their typical lateness (the median over steps of their own time
beyond the median of the other ranks' in that step), so one bad step — a warm-up, a hiccup
of a busy machine — does not make a straggler. The straggler is named when its lateness is
at least :data:`MIN_SHARE` of the median step time and :data:`MIN_LEAD` times the
runner-up's; a balanced job (whose ranks are each late now and then) names nobody. What it
costs the others is the lesser of its lateness and what they measurably wait per step.

Why: the straggler's own time per step is compared with the median of the other ranks —
finding by finding (``input_stall``, ``sync_stall``...), and category by category of the
breakdown — and the excess that accounts for the others' wait is reported with the
source line responsible (the finding's own line, or for a breakdown category the line whose
time grew most).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from explorer.job.reduce import excess_over_others

#: The others must lose at least this share of their step time waiting for one rank.
MIN_SHARE = 0.15
#: ... and cost the others at least this many times what the runner-up costs them: on a
#: busy machine every rank is late now and then; a straggler is late by far the most.
MIN_LEAD = 2.0
#: A cause is listed when its excess is at least this share of the others' wait per step.
MIN_CAUSE = 0.15
#: Comparing communication would be circular: the straggler waits least, by definition.
NOT_A_CAUSE = frozenset({"communication"})


@dataclass
class Cause:
    """One reason the straggler is slower: a finding kind or a breakdown category."""

    source: str  # "finding" or "breakdown"
    what: str  # finding kind or category
    title: str
    excess_ns_per_step: int
    rank_ns_per_step: int
    others_ns_per_step: int
    file: str = ""
    line: int = -1
    function: str = ""


@dataclass
class Straggler:
    rank: int
    share: float  # the others' wait for it over their step time (0-1)
    others_wait_ns_per_step: int  # per other rank, per step
    steps: list[int]
    waits_in: list[str]  # collective ops the others wait in, most wait first
    causes: list[Cause] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rank_busy(wait: pd.DataFrame) -> pd.DataFrame:
    """Per rank and step: ``busy_ns`` (its step time outside collective waits) and
    ``late_ns`` (that beyond the median of the other ranks' in the same step), from
    :func:`~explorer.job.reduce.wait_by_rank_step`."""
    w = wait[["rank", "step", "dur_ns", "wait_ns"]].copy()
    w["busy_ns"] = (w["dur_ns"] - w["wait_ns"]).clip(lower=0)
    table = w.pivot_table(index="step", columns="rank", values="busy_ns", aggfunc="sum")
    values = table.to_numpy(dtype=float)
    others = np.empty_like(values)
    for j in range(values.shape[1]):  # one column per rank: a handful to a few hundred
        rest = np.delete(values, j, axis=1)
        others[:, j] = np.nanmedian(rest, axis=1) if rest.shape[1] else np.nan
    late = pd.DataFrame(values - others, index=table.index, columns=table.columns)
    late_long = late.stack().rename("late_ns").reset_index()
    return w.merge(late_long, on=["rank", "step"], how="left").fillna({"late_ns": 0.0})


def rank_blame(wait: pd.DataFrame) -> pd.DataFrame:
    """Per rank: ``wait_ns`` (it waited), ``caused_ns`` (others waited in collectives it
    entered last), ``steps``, ``total_ns`` (its step time), ``busy_ns`` (its time outside
    collective waits) and ``late_ns_per_step`` (its typical lateness, see the module doc)."""
    busy = rank_busy(wait)
    per = (
        wait.groupby("rank")
        .agg(
            wait_ns=("wait_ns", "sum"),
            caused_ns=("caused_ns", "sum"),
            steps=("step", "count"),
            total_ns=("dur_ns", "sum"),
        )
        .reset_index()
    )
    own = busy.groupby("rank").agg(
        busy_ns=("busy_ns", "sum"), late_ns_per_step=("late_ns", "median")
    )
    return per.merge(own.reset_index(), on="rank", how="left")


def find_straggler(con: duckdb.DuckDBPyConnection, wait: pd.DataFrame) -> Straggler | None:
    """The straggler and why (see the module doc), or None for a balanced job."""
    blame = rank_blame(wait)
    n = len(blame)
    if n < 2:
        return None
    typical = blame.set_index("rank")["late_ns_per_step"]
    typical = typical.sort_values(ascending=False, kind="stable")
    rank = int(typical.index[0])
    late = float(typical.iloc[0])
    step_ns = float(wait["dur_ns"].median())
    runner_up = max(float(typical.iloc[1]), 0.0)
    if late <= 0 or late < MIN_SHARE * step_ns or late < MIN_LEAD * runner_up:
        return None
    others = blame[blame["rank"] != rank]
    others_wait = float(others["wait_ns"].sum()) / max(float(others["steps"].sum()), 1.0)
    per_other = min(late, others_wait)  # per other rank, per step
    mean_step = float(blame["total_ns"].sum()) / max(float(blame["steps"].sum()), 1.0)
    share = per_other / max(mean_step, 1.0)
    busy = rank_busy(wait)
    mine = busy[busy["rank"] == rank]
    step_mean = wait.groupby("step")["dur_ns"].mean()
    slow = mine["late_ns"].to_numpy() >= MIN_SHARE * step_mean.reindex(mine["step"]).to_numpy()
    ops = con.execute(
        "SELECT op, sum(wait_ns) AS w FROM coll_aligned WHERE rank <> ? GROUP BY op "
        "HAVING sum(wait_ns) > 0 ORDER BY w DESC, op",
        [rank],
    ).fetchall()
    s = Straggler(
        rank=rank,
        share=share,
        others_wait_ns_per_step=int(per_other),
        steps=[int(x) for x in mine["step"].to_numpy()[slow]],
        waits_in=[str(o) for o, _ in ops],
    )
    s.causes = causes(con, rank, s.others_wait_ns_per_step)
    return s


def causes(con: duckdb.DuckDBPyConnection, rank: int, extra_ns: int) -> list[Cause]:
    """What ``rank`` spends beyond the others that accounts for ``extra_ns`` per step."""
    floor = MIN_CAUSE * extra_ns
    out: list[Cause] = []
    found = excess_over_others(con, rank, "findings")
    own = con.execute(
        "SELECT kind, title, file, line, function FROM findings WHERE rank = ?", [rank]
    ).df()
    found = found.merge(own, on="kind", how="left")
    for row in found.itertuples(index=False):
        if row.kind in NOT_A_CAUSE or row.excess_ns < floor or pd.isna(row.title):
            continue
        out.append(
            Cause(
                "finding", str(row.kind), str(row.title), int(row.excess_ns),
                int(row.rank_ns), int(row.others_ns), str(row.file), int(row.line),
                str(row.function),
            )
        )  # fmt: skip
    explained = sum(c.excess_ns_per_step for c in out)
    if explained >= (1 - MIN_CAUSE) * extra_ns:
        return out
    cats = excess_over_others(con, rank, "breakdown")
    named = NOT_A_CAUSE | {c.what for c in out}  # the sync_stall category is its finding
    cats = cats[~cats["category"].isin(named) & (cats["excess_ns"] >= floor)]
    lines = excess_over_others(con, rank, "by_source")
    lines = lines[(lines["excess_ns"] > 0) & (lines["file"] != "")]
    for row in cats.head(2).itertuples(index=False):
        where = lines.iloc[0] if len(lines) else None
        out.append(
            Cause(
                "breakdown", str(row.category),
                f"{row.category.replace('_', ' ')} time above the other ranks",
                int(row.excess_ns), int(row.rank_ns), int(row.others_ns),
                "" if where is None else str(where["file"]),
                -1 if where is None else int(where["line"]),
                "" if where is None else str(where["function"]),
            )
        )  # fmt: skip
    return out
