"""The reduce step: cross-rank joins in DuckDB over the tables the workers stored.

Nothing here loads a trace. Each function takes a DuckDB connection on which
:func:`open_job_tables` made one view per rank table
(:data:`~explorer.job.rank_map.RANK_TABLES`) over the ranks' Parquet files, and returns a
small DataFrame (ranks × steps, or one row per matched collective).

Collective matching: a collective is the same operation on every rank when it has the same
process group and sequence number; where the trace has no sequence numbers, the same
process group, operation and position among that rank's operations of that kind. The
process group comes from the trace's args, or for gloo from the run-loop thread that ran
it (:func:`explorer.job.collectives.gloo_thread_groups`), so a subgroup's collectives match
among its members only. Pairs that disagree in operation or size are a warning
(:func:`ambiguous_matches`), never a silent pairing.

Clock alignment (ranks on one machine share its clock: see :func:`host_offsets`): a
collective finishes at (nearly) the same instant on every rank that took
part — nobody leaves before the last one arrives and the data has moved. Each rank's
offset is the median, over matched collectives, of its end minus the reference rank's
(the lowest rank) end; every time used after that is ``t - offset``.

Wait versus transfer, per rank and collective (aligned clock): the operation cannot finish
before the last rank enters it, so ``wait = min(last_start - start, dur)`` (≥ 0) is time
spent waiting for peers, and the rest, ``dur - wait``, is moving data. Bus bandwidth follows
the nccl-tests convention: ``bytes / transfer`` × ``2(n-1)/n`` for all-reduce,
``(n-1)/n`` for all-gather, reduce-scatter and all-to-all, 1 otherwise.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd

from explorer.job.rank_map import RANK_TABLES
from explorer.store import table_paths
from explorer.store.query import connect


def open_job_tables(rank_dirs: list[Path]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with a view per rank table over these ranks' store entries."""
    paths = [table_paths(d, verify=False) for d in rank_dirs]  # just written by the workers
    # One thread: the driver stays small; the workers did the heavy part.
    return connect({table: [p[table] for p in paths] for table in RANK_TABLES}, threads=1)


def step_matrix(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Rank × step step durations (ns): index rank, one column per step number."""
    long = con.execute("SELECT rank, step, dur_ns FROM steps ORDER BY rank, step").df()
    if long.empty:
        return pd.DataFrame()
    return long.pivot(index="rank", columns="step", values="dur_ns")


_MATCH = """
CREATE OR REPLACE TEMP TABLE coll_keyed AS
SELECT *,
       CASE WHEN seq >= 0 THEN 'seq:' || seq::VARCHAR
            ELSE op || '#' || (row_number() OVER (PARTITION BY rank, pg, op
                                                   ORDER BY start_ns, slice) - 1)::VARCHAR
       END AS key
FROM collectives;
CREATE OR REPLACE TEMP TABLE coll_matched AS
SELECT c.*, count(*) OVER (PARTITION BY pg, key) AS n_ranks
FROM coll_keyed c;
"""


def ambiguous_matches(con: duckdb.DuckDBPyConnection) -> list[str]:
    """A warning when collectives were paired that disagree — different operations or
    sizes on different ranks under one key (matched by position where the trace has no
    sequence numbers): their waits may be wrong. Empty when every pairing agrees."""
    row = con.execute(
        """
        SELECT count(*), min(pg || ' ' || key) FROM (
            SELECT pg, key FROM coll_matched WHERE n_ranks > 1 GROUP BY pg, key
            HAVING count(DISTINCT op) > 1
                OR count(DISTINCT bytes) FILTER (WHERE bytes > 0) > 1
        )
        """
    ).fetchone()
    if row is None or not int(row[0]):
        return []
    n = int(row[0])
    pg, _, key = str(row[1]).partition(" ")
    return [
        f"{n} matched collective{'s' if n != 1 else ''} disagree across ranks in operation "
        f"or size (first: group {pg or '(unnamed)'}, {key}): matched by position, their "
        "waits may be wrong"
    ]


#: Collectives every rank leaves together (a broadcast's root may leave before the others
#: have their data): the ones clocks are aligned on, when the job has any.
SYMMETRIC = "('allreduce', 'allgather', 'reducescatter', 'alltoall', 'barrier')"


def clock_offsets(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Per rank: ``offset_ns`` (subtract to align on the reference rank) and ``matched``
    (collectives it shares with the reference). Ranks with no shared collective get 0.
    See :func:`host_offsets` for ranks that share a machine."""
    con.execute(_MATCH)
    return con.execute(
        f"""
        WITH ref AS (SELECT min(rank) AS r FROM steps),
        sym AS (SELECT count(*) AS n FROM coll_matched WHERE n_ranks > 1 AND op IN {SYMMETRIC}),
        ends AS (
            SELECT c.rank, c.pg, c.key, c.end_ns FROM coll_matched c
            WHERE n_ranks > 1 AND (op IN {SYMMETRIC} OR (SELECT n FROM sym) = 0)
        ),
        d AS (
            SELECT e.rank, e.end_ns - f.end_ns AS delta
            FROM ends e JOIN ends f ON e.pg = f.pg AND e.key = f.key
            WHERE f.rank = (SELECT r FROM ref)
        ),
        per AS (SELECT rank, median(delta) AS offset_ns, count(*) AS matched FROM d GROUP BY rank)
        SELECT r.rank, coalesce(round(per.offset_ns), 0)::BIGINT AS offset_ns,
               coalesce(per.matched, 0)::BIGINT AS matched
        FROM (SELECT DISTINCT rank FROM steps) r LEFT JOIN per USING (rank)
        ORDER BY r.rank
        """
    ).df()


def host_offsets(offsets: pd.DataFrame, hosts: dict[int, str]) -> pd.DataFrame:
    """One clock per machine: ranks on the reference rank's host are not shifted, and the
    ranks of any other host all get that host's median offset. Ranks whose host is unknown
    keep their own offset. (On a busy machine collective ends differ by milliseconds from
    scheduling alone; shifting ranks that read the same clock would only add that error.)"""
    out = offsets.copy()
    host = out["rank"].map(lambda r: hosts.get(int(r), ""))
    known = host != ""
    if not known.any():
        return out
    ref_host = hosts.get(int(out["rank"].min()), "")
    per_host = out[known].groupby(host[known])["offset_ns"].median().round()
    if ref_host:
        per_host[ref_host] = 0
    out.loc[known, "offset_ns"] = host[known].map(per_host).astype("int64")
    return out


def register_offsets(con: duckdb.DuckDBPyConnection, offsets: pd.DataFrame) -> None:
    """Make ``coll_aligned``: matched collectives on the aligned clock with wait/transfer."""
    con.register("offsets_df", offsets)
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE coll_aligned AS
        WITH a AS (
            SELECT c.*, c.start_ns - o.offset_ns AS a_start, c.end_ns - o.offset_ns AS a_end
            FROM coll_matched c JOIN offsets_df o USING (rank)
            WHERE c.n_ranks > 1
        ),
        g AS (
            SELECT *, max(a_start) OVER w AS last_start, min(a_start) OVER w AS first_start,
                      arg_max(rank, a_start) OVER w AS last_rank
            FROM a WINDOW w AS (PARTITION BY pg, key)
        )
        SELECT *, greatest(0, least(last_start - a_start, dur_ns)) AS wait_ns,
                  dur_ns - greatest(0, least(last_start - a_start, dur_ns)) AS transfer_ns
        FROM g
        """
    )
    con.unregister("offsets_df")


def matched_collectives(con: duckdb.DuckDBPyConnection, world_size: int) -> pd.DataFrame:
    """One row per collective matched on two or more ranks (needs :func:`register_offsets`).

    Columns: ``pg, key, op, name, step, ranks, bytes, group_size, start_ns`` (aligned, first
    entry), ``skew_ns`` (last entry − first), ``dur_ns``, ``wait_ns`` and ``transfer_ns``
    (means over ranks; ``dur = wait + transfer`` exactly), ``last_rank`` (who entered last), ``caused_wait_ns`` (the other ranks' wait, summed), ``busbw_gbps``.
    """
    return con.execute(
        """
        WITH per AS (
            SELECT pg, key, any_value(op) AS op, min(name) AS name,
                   min(step) FILTER (WHERE step >= 0) AS step,
                   count(*) AS ranks, max(bytes) AS bytes,
                   CASE WHEN max(group_size) > 0 THEN max(group_size) ELSE ? END
                       AS group_size,
                   min(a_start) AS start_ns, max(last_start) - min(first_start) AS skew_ns,
                   avg(dur_ns)::BIGINT AS dur_ns, avg(wait_ns)::BIGINT AS wait_ns,
                   (avg(dur_ns)::BIGINT - avg(wait_ns)::BIGINT) AS transfer_ns,
                   any_value(last_rank) AS last_rank,
                   sum(wait_ns) FILTER (WHERE rank <> last_rank) AS caused_wait_ns
            FROM coll_aligned GROUP BY pg, key
        )
        SELECT *, CASE WHEN bytes > 0 AND transfer_ns > 0 THEN
                  bytes / transfer_ns * CASE
                      WHEN op = 'allreduce' THEN 2.0 * (group_size - 1) / group_size
                      WHEN op IN ('allgather', 'reducescatter', 'alltoall')
                           THEN (group_size - 1) / group_size
                      ELSE 1.0 END
                  END AS busbw_gbps
        FROM per ORDER BY start_ns
        """,
        [int(world_size)],
    ).df()


def wait_by_rank_step(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Per rank and step: ``wait_ns`` (time it waited in collectives for others) and
    ``caused_ns`` (the other ranks' wait in collectives it entered last)."""
    return con.execute(
        """
        WITH s AS (
            SELECT pg, key, min(step) FILTER (WHERE step >= 0) AS step FROM coll_aligned
            GROUP BY pg, key
        ),
        waited AS (
            SELECT c.rank, s.step, sum(c.wait_ns) AS wait_ns
            FROM coll_aligned c JOIN s USING (pg, key) GROUP BY c.rank, s.step
        ),
        caused AS (
            SELECT c.last_rank AS rank, s.step, sum(c.wait_ns) AS caused_ns
            FROM coll_aligned c JOIN s USING (pg, key)
            WHERE c.rank <> c.last_rank GROUP BY c.last_rank, s.step
        )
        SELECT st.rank, st.step, coalesce(w.wait_ns, 0)::BIGINT AS wait_ns,
               coalesce(c.caused_ns, 0)::BIGINT AS caused_ns, st.dur_ns
        FROM steps st
        LEFT JOIN waited w ON w.rank = st.rank AND w.step = st.step
        LEFT JOIN caused c ON c.rank = st.rank AND c.step = st.step
        ORDER BY st.rank, st.step
        """
    ).df()


#: table → (the columns a row is identified by, the per-step time compared)
_COMPARED: dict[str, tuple[tuple[str, ...], str]] = {
    "findings": (("kind",), "time_lost_ns"),
    "finding_steps": (("kind",), "ns"),
    "breakdown": (("category",), "ns"),
    "by_source": (("file", "line", "function"), "host_ns + device_ns"),
    "cause_lines": (("category", "file", "line", "function"), "ns"),
}

#: The compared tables with a step column.
_STEPPED = frozenset({"finding_steps", "breakdown"})


def excess_over_others(
    con: duckdb.DuckDBPyConnection, rank: int, table: str, steps: list[int] | None = None
) -> pd.DataFrame:
    """What ``rank`` spends per step beyond the median of the other ranks.

    ``table`` is ``"findings"`` (by kind: time lost), ``"finding_steps"`` (the same, step
    by step), ``"breakdown"`` (by category), ``"by_source"`` (by line: host + device time)
    or ``"cause_lines"`` (by category and statement). ``steps`` keeps those steps only,
    for the tables that have a step column (the steady-state steps). Columns: the table's
    key columns, then ``rank_ns, others_ns, excess_ns`` (per step; a rank without a row
    counts 0), largest excess first.
    """
    keys, value = _COMPARED[table]
    cols = ", ".join(keys)
    step_filter = ""
    if steps is not None and table in _STEPPED:
        step_filter = f" AND step IN ({', '.join(str(int(x)) for x in steps) or 'NULL'})"
    return con.execute(
        f"""
        WITH n AS (SELECT rank, count(*) AS steps FROM steps WHERE true{step_filter} GROUP BY rank),
        per AS (
            SELECT t.rank, {cols}, sum({value})::DOUBLE / any_value(n.steps) AS ns
            FROM {table} t JOIN n USING (rank) WHERE true{step_filter.replace("step", "t.step")}
            GROUP BY t.rank, {cols}
        ),
        full_ AS (
            SELECT n.rank, w.*, coalesce(p.ns, 0) AS ns
            FROM n CROSS JOIN (SELECT DISTINCT {cols} FROM per) w
            LEFT JOIN per p ON p.rank = n.rank AND {" AND ".join(f"p.{k} = w.{k}" for k in keys)}
        )
        SELECT {cols},
               coalesce(max(ns) FILTER (WHERE rank = $1), 0)::BIGINT AS rank_ns,
               coalesce(median(ns) FILTER (WHERE rank <> $1), 0)::BIGINT AS others_ns,
               (coalesce(max(ns) FILTER (WHERE rank = $1), 0)
                - coalesce(median(ns) FILTER (WHERE rank <> $1), 0))::BIGINT AS excess_ns
        FROM full_ GROUP BY {cols}
        ORDER BY excess_ns DESC, {cols}
        """,
        [int(rank)],
    ).df()
