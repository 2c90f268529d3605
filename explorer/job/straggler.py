"""Who holds the job back, in which steps, what it costs the others, and why.

In a synchronous job every rank's step takes about as long as the slowest rank's: the fast
ranks spend the difference waiting inside collectives. So the straggler is not the rank
with the longest steps; it is the rank that enters collectives *last*, and what it costs is
the other ranks' wait in those collectives (:func:`explorer.job.reduce.wait_by_rank_step`).

Ranks are compared by what they typically cost the others per step (the median over
steps of the wait they cause), so one bad step — a warm-up, a hiccup of a busy machine —
does not make a straggler. The straggler is named when that typical cost, per other rank,
is at least :data:`MIN_SHARE` of the median step time and :data:`MIN_LEAD` times the
runner-up's; a balanced job (whose ranks are each late now and then) names nobody. How
much the others lose is then reported over all steps.

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


def rank_blame(wait: pd.DataFrame) -> pd.DataFrame:
    """Per rank: ``wait_ns`` (it waited), ``caused_ns`` (others waited for it), ``steps``,
    ``total_ns`` (its step time), from :func:`~explorer.job.reduce.wait_by_rank_step`."""
    return (
        wait.groupby("rank")
        .agg(
            wait_ns=("wait_ns", "sum"),
            caused_ns=("caused_ns", "sum"),
            steps=("step", "count"),
            total_ns=("dur_ns", "sum"),
        )
        .reset_index()
    )


def find_straggler(
    con: duckdb.DuckDBPyConnection, wait: pd.DataFrame, collectives: pd.DataFrame
) -> Straggler | None:
    """The straggler and why (see the module doc), or None for a balanced job."""
    blame = rank_blame(wait)
    n = len(blame)
    if n < 2 or blame["caused_ns"].sum() <= 0:
        return None
    # a rank's typical cost per step: one bad step (a warm-up, a hiccup) is not a straggler
    typical = wait.groupby("rank")["caused_ns"].median().sort_values(ascending=False, kind="stable")
    rank = int(typical.index[0])
    top = blame.set_index("rank").loc[rank]
    step_ns = float(wait["dur_ns"].median())
    if (
        typical.iloc[0] / (n - 1) < MIN_SHARE * step_ns
        or typical.iloc[0] < MIN_LEAD * typical.iloc[1]
    ):
        return None
    per_other = float(top["caused_ns"]) / (n - 1)
    share = per_other / max(float(blame["total_ns"].mean()), 1.0)
    n_steps = max(int(top["steps"]), 1)
    mine = wait[wait["rank"] == rank]
    step_mean = wait.groupby("step")["dur_ns"].mean()
    slow = (
        mine["caused_ns"].to_numpy() / (n - 1)
        >= MIN_SHARE * step_mean.reindex(mine["step"]).to_numpy()
    )
    ops = (
        collectives[collectives["last_rank"] == rank]
        .groupby("op")["caused_wait_ns"]
        .sum()
        .sort_values(ascending=False)
    )
    s = Straggler(
        rank=rank,
        share=share,
        others_wait_ns_per_step=int(per_other / n_steps),
        steps=[int(x) for x in mine["step"].to_numpy()[slow]],
        waits_in=[str(o) for o, v in ops.items() if v > 0],
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
