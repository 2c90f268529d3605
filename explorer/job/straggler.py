"""Who holds the job back, in which steps, what it costs the others, and why.

In a synchronous job every rank's step takes about as long as the slowest rank's: the fast
ranks spend the difference waiting inside collectives. So the straggler is not the rank
with the longest steps. Nor is it simply the rank that enters collectives last: a rank
held up by the straggler in one collective (the root of DDP's buffer broadcast, waiting
for a late receiver) then enters the next collective late too, and the last-entry
count blames it for waits it did not cause. The straggler is the rank with the most time
of its own — step time outside collective waits (:func:`rank_busy`) — beyond the other
ranks': that is the time the others spend waiting for it, wherever the wait lands.

Ranks are compared on the steady state: leading start-up steps (:func:`startup_steps`: a
first loader start, a compile) are reported apart, and a rank's lateness is the median over
the other steps of its own time beyond the median of the other ranks' in that step, so one
bad step — a hiccup of a busy machine — does not make a straggler. The same median, over
the median steady step, names, ranks and feeds ``--fail-on straggler>X%``. A rank is named
(:func:`verdict`) when that lateness is at least :data:`MIN_SHARE` of the step and
:data:`MIN_LEAD` times the runner-up's, when it is late in most steady-state steps
(:data:`MIN_LATE_STEPS`) and steadily so (:data:`MIN_T`), and when its causes explain at least :data:`MIN_EXPLAINED` of its
lateness; otherwise the report says "imbalance without a consistent straggler", with the
spread and the rule that failed. (With two ranks each one's lateness is minus the other's,
so the runner-up's is never positive and the other rules decide.)

Why: the straggler's own time per steady step is compared with the median of the other
ranks — finding by finding (``input_stall``, ``sync_stall``...), then category by category
of the breakdown, less what those findings already explain — and each cause is reported at
its own line: a finding's own, a category's the statement whose time in that category grew
most (:func:`explorer.analysis.cause_lines.category_lines`). A category whose excess is
mostly checkpointing or file writes is reported as ``host_io``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from explorer.job.reduce import excess_over_others
from explorer.units import fmt_ns

#: The others must lose at least this share of their step time waiting for one rank.
MIN_SHARE = 0.15
#: ... and cost the others at least this many times what the runner-up costs them: on a
#: busy machine every rank is late now and then; a straggler is late by far the most.
MIN_LEAD = 2.0
#: A cause is listed when its excess is at least this share of the others' wait per step.
MIN_CAUSE = 0.15
#: ... or this share when the other ranks hardly have that finding at all (at most
#: ONLY_HERE of the rank's time in it): a kind of work only this rank does is a cause even
#: when a category's excess is larger (200 ``.item()`` a step on one rank: 11% of the
#: others' wait in sync stalls, the rest host-bound time in the same loop).
MIN_CAUSE_ALONE = 0.05
ONLY_HERE = 0.1
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
    #: A finding's next line, for context (an input stall's loop beside its slow read)
    context_file: str = ""
    context_line: int = -1
    context_function: str = ""
    #: A category's excess spread over many lines alike (no line holds half of it): said,
    #: but it explains none of the lateness
    spread: bool = False


@dataclass
class Straggler:
    rank: int
    share: float  # the others' wait for it over their step time (0-1)
    others_wait_ns_per_step: int  # per other rank, per step
    steps: list[int]
    waits_in: list[str]  # collective ops the others wait in, most wait first
    causes: list[Cause] = field(default_factory=list)
    #: Ranks late alike with it, from the collectives of a smaller group they share (the
    #: other member of a 2-rank group's extra all_reduces): named with it, not apart
    with_ranks: list[int] = field(default_factory=list)

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


#: A leading step whose median duration over the ranks is this many times the median step
#: is start-up (the first loader start, a compile): reported apart, not averaged in.
STARTUP_FACTOR = 2.0
#: A straggler is late (by at least MIN_SHARE of the step) in more than this share of the
#: steady-state steps ...
MIN_LATE_STEPS = 0.6
#: ... and steadily so: the mean of its lateness over the steady steps is at least this many
#: standard errors above zero (a one-sample t over the steps, with three steps or more). A
#: busy machine makes a rank late by a lot in a few steps and early in others; a straggler
#: is late in every step by about the same. (A balanced 2-rank job on a loaded machine was
#: late -0.5, 0.7, 4.5, 1.1, 2.6, 7.4 ms in its six steady steps: t = 2.2; a rank with a 3x
#: batch 147, -60, 193, 377, 283, 238, 98, 75 ms: t = 3.4.)
MIN_T = 2.5
#: ... and its causes explain at least this share of its lateness; otherwise the report says
#: "imbalance without a consistent straggler".
MIN_EXPLAINED = 0.5


def steadiness(late_per_step: np.ndarray) -> float:
    """The one-sample t of a rank's lateness per steady step (mean over standard error);
    infinite when every step is late by the same, NaN with fewer than three steps."""
    x = np.asarray(late_per_step, np.float64)
    if len(x) < 3:
        return float("nan")
    sd = float(x.std(ddof=1))
    mean = float(x.mean())
    if sd == 0:
        return float("inf") if mean > 0 else 0.0
    return mean / (sd / np.sqrt(len(x)))


#: A category's excess is at a line when that line holds at least this share of it.
CONCENTRATED = 0.5
SPREAD_NOTE = ", spread over many lines alike (a busier or slower machine?)"
HOST_IO_TITLE = "checkpointing / host I/O (torch.save, file writes) above the other ranks"
#: Finding kinds and the breakdown category their time falls in (so a category's excess is
#: not counted again beside the finding that explains it).
KIND_CATEGORY = {
    "input_stall": "host_bound",
    "sync_stall": "sync_stall",
    "compilation": "compile",
    "memcpy_stall": "data_movement",
    "launch_bound": "host_bound",
    "cpu_fallback": "host_bound",
    "communication": "communication",
}


@dataclass
class Verdict:
    """Who, if anyone, holds the job back, on the steady-state basis.

    ``straggler`` is None for a balanced job and for an imbalance no rank explains
    (``reason`` says which rule failed). ``late_ns`` / ``share`` are the worst rank's
    median lateness over the steady-state steps and that over the median steady step —
    the one statistic naming, ranking and ``--fail-on straggler>X%`` read."""

    straggler: Straggler | None
    steady_steps: list[int]
    startup_steps: list[int]
    step_ns: int
    worst_rank: int | None
    late_ns: int
    share: float
    late_steps: int
    spread_ns: int  # the ranks' own time per steady step: slowest median minus fastest
    explained_ns: int
    reason: str = ""

    def imbalance(self) -> dict[str, Any]:
        return {
            "worst_rank": self.worst_rank,
            "late_ns_per_step": self.late_ns,
            "share": self.share,
            "late_steps": self.late_steps,
            "steady_steps": len(self.steady_steps),
            "spread_ns_per_step": self.spread_ns,
            "explained_ns_per_step": self.explained_ns,
            "reason": self.reason,
        }


def startup_steps(wait: pd.DataFrame) -> list[int]:
    """The leading steps whose median duration over the ranks is at least
    :data:`STARTUP_FACTOR` times the median step (at most half the steps)."""
    per = wait.groupby("step")["dur_ns"].median().sort_index()
    if len(per) < 3:
        return []
    typical = float(per.median())
    out: list[int] = []
    for step, dur in per.items():
        if dur < STARTUP_FACTOR * typical or len(out) >= len(per) // 2:
            break
        out.append(int(step))
    return out


def find_straggler(con: duckdb.DuckDBPyConnection, wait: pd.DataFrame) -> Straggler | None:
    """The straggler and why (see the module doc), or None."""
    return verdict(con, wait).straggler


def verdict(con: duckdb.DuckDBPyConnection, wait: pd.DataFrame) -> Verdict:
    """The job's verdict (see :class:`Verdict` and the module doc)."""
    start = startup_steps(wait)
    steady_wait = wait[~wait["step"].isin(start)]
    steady = sorted(int(x) for x in steady_wait["step"].unique())
    busy = rank_busy(steady_wait) if len(steady_wait) else rank_busy(wait)
    typical = busy.groupby("rank")["late_ns"].median().sort_values(ascending=False, kind="stable")
    own = busy.groupby("rank")["busy_ns"].median()
    step_ns = float(steady_wait["dur_ns"].median()) if len(steady_wait) else 0.0
    empty = Verdict(None, steady, start, int(step_ns), None, 0, 0.0, 0, 0, 0, "one rank")
    if len(typical) < 2 or step_ns <= 0:
        return empty
    rank = int(typical.index[0])
    late = max(float(typical.iloc[0]), 0.0)
    runner_up = max(float(typical.iloc[1]), 0.0)
    mine = busy[busy["rank"] == rank]
    late_mask = mine["late_ns"].to_numpy() >= MIN_SHARE * step_ns
    others = steady_wait[steady_wait["rank"] != rank]
    others_wait = float(others.groupby("step")["wait_ns"].mean().median()) if len(others) else 0.0
    per_other = min(late, others_wait)
    v = Verdict(
        None, steady, start, int(step_ns), rank, int(late), late / step_ns,
        int(late_mask.sum()), int(own.max() - own.min()), 0,
    )  # fmt: skip
    if late <= 0 or late < MIN_SHARE * step_ns:
        v.reason = "no rank is late by much"
        return v
    if late < MIN_LEAD * runner_up:
        second = int(typical.index[1])
        group = subgroup(con, [rank, second])
        if group is not None:
            return _group_verdict(con, v, busy, typical, group, steady_wait)
        v.reason = f"rank {second} is nearly as late"
        return v
    if late_mask.sum() <= MIN_LATE_STEPS * len(mine):
        v.reason = (
            f"rank {rank} is late in {int(late_mask.sum())} of {len(mine)} steady-state steps"
        )
        return v
    ops = con.execute(
        "SELECT op, sum(wait_ns) AS w FROM coll_aligned WHERE rank <> ? GROUP BY op "
        "HAVING sum(wait_ns) > 0 ORDER BY w DESC, op",
        [rank],
    ).fetchall()
    s = Straggler(
        rank=rank,
        share=per_other / step_ns,
        others_wait_ns_per_step=int(per_other),
        steps=[int(x) for x in mine["step"].to_numpy()[late_mask]],
        waits_in=[str(o) for o, _ in ops],
    )
    s.causes = causes(con, rank, int(late), steady)
    v.explained_ns = sum(c.excess_ns_per_step for c in s.causes if not c.spread)
    if v.explained_ns < MIN_EXPLAINED * late:
        v.reason = (
            f"what rank {rank} does beyond the others explains "
            f"{100 * v.explained_ns / late:.0f}% of its lateness"
        )
        return v
    t = steadiness(mine["late_ns"].to_numpy())
    if t < MIN_T:  # NaN (under three steps) passes: the rules above decide
        v.reason = f"rank {rank}'s lateness varies too much from step to step (t = {t:.1f})"
        return v
    v.straggler = s
    v.share = s.share
    return v


@dataclass(frozen=True)
class Subgroup:
    """Ranks that run the collectives of a process group smaller than the job, which the
    other ranks are not in (a 2-rank group's extra all_reduces)."""

    pg: str
    op: str
    members: list[int]
    calls: int  # over all members and steps
    dur_ns: int  # the members' time in them, summed


def subgroup(con: duckdb.DuckDBPyConnection, ranks: list[int]) -> Subgroup | None:
    """The smaller process group (fewer members than the job) whose members are exactly
    ``ranks`` and in whose collectives they spend the most time, or None."""
    rows = con.execute(
        """
        WITH members AS (
            SELECT pg, count(DISTINCT rank) AS n FROM coll_matched GROUP BY pg
        ), world AS (SELECT count(DISTINCT rank) AS n FROM steps)
        SELECT c.pg, any_value(c.op) AS op, count(*) AS calls,
               sum(c.dur_ns) AS ns, list(DISTINCT c.rank ORDER BY c.rank) AS ranks
        FROM coll_matched c JOIN members m USING (pg)
        WHERE m.n < (SELECT n FROM world) AND c.rank IN (SELECT unnest($1::BIGINT[]))
        GROUP BY c.pg ORDER BY ns DESC LIMIT 1
        """,
        [[int(r) for r in ranks]],
    ).fetchall()
    if not rows:
        return None
    pg, op, calls, ns, members = rows[0]
    if sorted(int(r) for r in members) != sorted(int(r) for r in ranks):
        return None
    return Subgroup(str(pg), str(op), sorted(int(r) for r in members), int(calls), int(ns))


def subgroup_reason(g: Subgroup, steps: int) -> str:
    """ "ranks 1 and 2 are late alike: each spends 52 ms per step in 5 allreduces per step
    of their 2-rank group (pg 1), which the other ranks are not in"."""
    k = len(g.members)
    per = g.dur_ns / k / max(steps, 1)
    n = g.calls / k / max(steps, 1)
    who = " and ".join(str(r) for r in g.members) if k == 2 else ", ".join(map(str, g.members))
    return (
        f"ranks {who} are late alike: each spends {fmt_ns(per)} per step in "
        f"{n:.3g} {g.op}{'s' if n != 1 else ''} per step of their {k}-rank group "
        f"(pg {g.pg}), which the other ranks are not in"
    )


def _group_verdict(
    con: duckdb.DuckDBPyConnection,
    v: Verdict,
    busy: pd.DataFrame,
    typical: pd.Series,
    g: Subgroup,
    steady_wait: pd.DataFrame,
) -> Verdict:
    """The verdict when the two latest ranks are late alike from their own smaller group's
    collectives. Neither holds the other back — each waits for the other in turn — but
    together they hold back the ranks outside the group, with the time they themselves
    spend moving data in the collectives those ranks are not in. So the pair is compared
    with the ranks outside it, by the same rules as one rank, and named: the latest member
    (its own time, outside waits, is the most beyond the outsiders'), with the others in
    ``with_ranks`` and the group's collectives as its ``communication`` cause, at the
    statement where the members' own time goes beyond the outsiders' most (the
    ``dist.all_reduce(..., group=...)`` call)."""
    steps = sorted(int(x) for x in steady_wait["step"].unique())
    reason = subgroup_reason(g, len(steps) or 1)
    rank = int(v.worst_rank) if v.worst_rank is not None else g.members[0]
    outside = [int(r) for r in typical.index if int(r) not in g.members]
    table = busy.pivot_table(index="step", columns="rank", values="busy_ns", aggfunc="sum")
    if not outside or rank not in table.columns:
        v.reason = reason
        return v
    late_steps = table[rank] - table[outside].median(axis=1)
    late = max(float(late_steps.median()), 0.0)
    step_ns = float(v.step_ns)
    mask = late_steps.to_numpy() >= MIN_SHARE * step_ns
    v.late_ns, v.share, v.late_steps = int(late), late / step_ns, int(mask.sum())
    best_outside = max(float(typical[outside].max()), 0.0)
    if late < MIN_SHARE * step_ns or late < MIN_LEAD * best_outside:
        v.reason = reason
        return v
    if mask.sum() <= MIN_LATE_STEPS * len(mask):
        v.reason = f"{reason}; they are late in {int(mask.sum())} of {len(mask)} steady steps"
        return v
    own = con.execute(
        "SELECT sum(transfer_ns)::DOUBLE, sum(dur_ns)::DOUBLE, count(*) FROM coll_aligned "
        "WHERE rank = ? AND pg = ? AND step IN (SELECT unnest(?::BIGINT[]))",
        [rank, g.pg, steps],
    ).fetchone()
    transfer, dur, calls = own if own is not None and own[0] is not None else (0.0, 0.0, 0)
    n = len(steps) or 1
    where = _line_beyond(con, rank, outside)
    partners = [r for r in g.members if r != rank]
    per_call = float(calls) / n
    cause = Cause(
        "collectives", "communication",
        f"{per_call:.3g} {g.op}{'s' if per_call != 1 else ''} per step in its "
        f"{len(g.members)}-rank group with rank{'s' if len(partners) > 1 else ''} "
        f"{', '.join(map(str, partners))} (pg {g.pg}), which the other ranks are not in",
        int(float(transfer) / n), int(float(dur) / n), 0,
        *(where or ("", -1, "")),
    )  # fmt: skip
    v.explained_ns = cause.excess_ns_per_step
    if v.explained_ns < MIN_EXPLAINED * late:
        v.reason = (
            f"{reason}; their data movement there explains "
            f"{100 * v.explained_ns / late:.0f}% of their lateness"
        )
        return v
    others = steady_wait[steady_wait["rank"].isin(outside)]
    others_wait = float(others.groupby("step")["wait_ns"].mean().median()) if len(others) else 0.0
    per_other = min(late, others_wait)
    ops = con.execute(
        "SELECT op, sum(wait_ns) AS w FROM coll_aligned WHERE rank IN (SELECT unnest(?::BIGINT[])) "
        "GROUP BY op HAVING sum(wait_ns) > 0 ORDER BY w DESC, op",
        [outside],
    ).fetchall()
    v.straggler = Straggler(
        rank=rank, share=per_other / step_ns, others_wait_ns_per_step=int(per_other),
        steps=[int(x) for x in late_steps.index.to_numpy()[mask]],
        waits_in=[str(o) for o, _ in ops], causes=[cause], with_ranks=partners,
    )  # fmt: skip
    v.share = v.straggler.share
    return v


def _line_beyond(
    con: duckdb.DuckDBPyConnection, rank: int, outside: list[int]
) -> tuple[str, int, str] | None:
    """The statement where ``rank``'s own time (all categories, the whole capture: the
    statements table has no steps) most exceeds the median of the ``outside`` ranks', or
    None."""
    row = con.execute(
        """
        WITH per AS (
            SELECT rank, file, line, function, sum(ns)::DOUBLE AS ns FROM cause_lines
            WHERE file <> '' AND (rank = $1 OR rank IN (SELECT unnest($2::BIGINT[])))
            GROUP BY ALL
        ), keys AS (SELECT DISTINCT file, line, function FROM per WHERE rank = $1),
        outs AS (
            SELECT k.file, k.line, k.function, median(coalesce(p.ns, 0)) AS ns
            FROM keys k CROSS JOIN (SELECT unnest($2::BIGINT[]) AS rank) o
            LEFT JOIN per p ON p.rank = o.rank AND p.file = k.file AND p.line = k.line
                AND p.function = k.function
            GROUP BY ALL
        )
        SELECT m.file, m.line, m.function FROM per m JOIN outs USING (file, line, function)
        WHERE m.rank = $1 AND m.file <> '' ORDER BY m.ns - outs.ns DESC, m.line LIMIT 1
        """,
        [int(rank), [int(r) for r in outside]],
    ).fetchone()
    return None if row is None else (str(row[0]), int(row[1]), str(row[2]))


def causes(
    con: duckdb.DuckDBPyConnection, rank: int, extra_ns: int, steps: list[int] | None = None
) -> list[Cause]:
    """What ``rank`` spends beyond the others that accounts for ``extra_ns`` per step
    (over ``steps``, default all). Each cause has its own line: a finding's own, a
    category's the statement whose time in that category grew most."""
    floor = MIN_CAUSE * extra_ns
    out: list[Cause] = []
    found = excess_over_others(con, rank, "finding_steps", steps)
    own = con.execute(
        "SELECT kind, title, file, line, function, context_file, context_line, "
        "context_function FROM findings WHERE rank = ?",
        [rank],
    ).df()
    found = found.merge(own, on="kind", how="left")
    covered: dict[str, int] = {}
    for row in found.itertuples(index=False):
        alone = row.others_ns <= ONLY_HERE * row.rank_ns  # the others hardly do this at all
        if (
            row.kind in NOT_A_CAUSE
            or row.excess_ns < (MIN_CAUSE_ALONE * extra_ns if alone else floor)
            or pd.isna(row.title)
        ):
            continue
        out.append(
            Cause(
                "finding", str(row.kind), str(row.title), int(row.excess_ns),
                int(row.rank_ns), int(row.others_ns), str(row.file), int(row.line),
                str(row.function), str(row.context_file), int(row.context_line),
                str(row.context_function),
            )
        )  # fmt: skip
        cat = KIND_CATEGORY.get(str(row.kind), "")
        covered[cat] = covered.get(cat, 0) + int(row.excess_ns)
    explained = sum(c.excess_ns_per_step for c in out)
    if explained >= (1 - MIN_CAUSE) * extra_ns:
        return out
    cats = excess_over_others(con, rank, "breakdown", steps)
    cats["excess_ns"] = cats["excess_ns"] - cats["category"].map(covered).fillna(0).astype("int64")
    cats = cats[~cats["category"].isin(NOT_A_CAUSE) & (cats["excess_ns"] >= floor)]
    cats = cats.sort_values("excess_ns", ascending=False, kind="stable")
    lines = excess_over_others(con, rank, "cause_lines")
    lines = lines[(lines["excess_ns"] > 0) & (lines["file"] != "")]
    io = lines[lines["category"] == "host_io"]
    for row in cats.head(2).itertuples(index=False):
        mine = lines[lines["category"] == row.category]
        what, title = (
            str(row.category),
            f"{row.category.replace('_', ' ')} time above the other ranks",
        )
        if len(io) and int(io["excess_ns"].sum()) >= MIN_EXPLAINED * int(row.excess_ns):
            # most of the category's excess is checkpointing or file writes: say so
            what, title, mine = "host_io", HOST_IO_TITLE, io
            io = io.iloc[0:0]
        where = mine.iloc[0] if len(mine) else None
        # Time that grew everywhere alike (every line a little slower: a busier or slower
        # machine) is said so, and explains no lateness: a cause has a place. The place
        # must hold most of the category's excess, not just most of what its lines that
        # grew add up to (a balanced job's rank 0 once had 9.9 ms/step more host time, of
        # which its one line that grew held 1.7 ms: the rest was at no line, or at lines
        # that shrank by as much elsewhere).
        spread = what != "host_io" and (
            where is None or float(where["excess_ns"]) < CONCENTRATED * float(row.excess_ns)
        )
        out.append(
            Cause(
                "breakdown", what, title + (SPREAD_NOTE if spread else ""),
                int(row.excess_ns), int(row.rank_ns), int(row.others_ns),
                "" if where is None else str(where["file"]),
                -1 if where is None else int(where["line"]),
                "" if where is None else str(where["function"]),
                spread=spread,
            )
        )  # fmt: skip
    uneven = uneven_work(con, rank)
    if uneven is not None:
        for c in out:
            if c.what == "compute":  # the extra compute is the extra work
                c.what, c.title, c.spread = "uneven_work", uneven, False
                break
        else:
            comp = excess_over_others(con, rank, "breakdown", steps)
            comp = comp[comp["category"] == "compute"]
            if len(comp) and int(comp["excess_ns"].iloc[0]) > 0:
                row = comp.iloc[0]
                mine = lines[lines["category"] == "compute"]
                where = mine.iloc[0] if len(mine) else None
                out.append(
                    Cause(
                        "breakdown", "uneven_work", uneven, int(row["excess_ns"]),
                        int(row["rank_ns"]), int(row["others_ns"]),
                        "" if where is None else str(where["file"]),
                        -1 if where is None else int(where["line"]),
                        "" if where is None else str(where["function"]),
                    )
                )  # fmt: skip
    return out


#: A rank's operators take inputs at least this many times larger than the others' to be
#: "uneven work".
UNEVEN_RATIO = 1.5


def uneven_work(con: duckdb.DuckDBPyConnection, rank: int) -> str | None:
    """``"rank 2's batch is 3× the others' (input shape [96, …] vs [32, …] in
    aten::linear)"`` when ``rank``'s heaviest operator that every other rank runs with one
    same input shape runs on ``rank`` about as often with an input :data:`UNEVEN_RATIO`
    times larger; else None."""
    rows = con.execute(
        """
        WITH dom AS (
            SELECT rank, op, arg_max(shape, count) AS shape, arg_max(numel, count) AS numel,
                   sum(ns) AS ns, sum(count) AS calls
            FROM op_shapes GROUP BY rank, op
        ),
        others AS (
            SELECT op, min(shape) AS shape, min(numel) AS numel, median(calls) AS calls,
                   count(DISTINCT shape) AS kinds, count(*) AS n
            FROM dom WHERE rank <> $1 GROUP BY op
        )
        SELECT m.op, m.shape, m.numel, o.shape, o.numel
        FROM dom m JOIN others o USING (op)
        WHERE m.rank = $1 AND o.kinds = 1 AND o.numel > 0
              AND m.numel >= $2 * o.numel
              -- the same ops, as often: more calls of an op is more work, not bigger work
              AND m.calls BETWEEN o.calls / $2 AND o.calls * $2
              AND o.n = (SELECT count(DISTINCT rank) FROM steps) - 1
        ORDER BY m.ns DESC, m.op LIMIT 1
        """,
        [int(rank), UNEVEN_RATIO],
    ).fetchall()
    if not rows:
        return None
    op, mine, n_mine, theirs, n_theirs = rows[0]
    ratio = float(n_mine) / float(n_theirs)
    a, b = _dims(str(mine)), _dims(str(theirs))
    batch = len(a) == len(b) > 1 and a[1:] == b[1:] and a[0] != b[0]
    what = "batch" if batch else "input"

    def short(d: list[int]) -> str:
        return f"[{d[0]}, …]" if batch else str(d)

    return (
        f"rank {rank}'s {what} is {ratio:.3g}× the others' (input shape {short(a)} vs "
        f"{short(b)} in {op})"
    )


def _dims(text: str) -> list[int]:
    return [int(x) for x in text.strip("[]").split(",") if x.strip().lstrip("-").isdigit()]
