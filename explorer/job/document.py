"""The job report document: map the ranks on Dask, reduce in DuckDB, gather plain data.

:func:`job_document` is the whole pipeline; the renderers in :mod:`explorer.job.render`
only format what it returns. The schema is documented in ``docs/job_report_schema.md``
(:data:`JOB_SCHEMA_VERSION`).
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from explorer.errors import ExplorerError, UsageError
from explorer.job import reduce
from explorer.job.engine import RankProgress, map_ranks
from explorer.job.rank_map import RankSummary
from explorer.job.run_dir import job_files, not_one_job
from explorer.job.straggler import Straggler, Verdict, rank_blame, verdict
from explorer.store.cache import cache_root
from explorer.trace.step_options import StepOptions

JOB_SCHEMA_VERSION = 3
#: At most this many collectives are listed one by one (most waiting first); totals by
#: operation always cover all of them.
MAX_COLLECTIVE_ROWS = 200


def default_store(run: str) -> Path:
    """Where a job's tables go unless the user names a store: the cache dir, never the run."""
    digest = hashlib.sha1(str(Path(run).resolve()).encode()).hexdigest()[:16]
    return cache_root() / "jobs" / digest


def job_document(
    run: str,
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    store: str | Path | None = None,
    use_cache: bool = True,
    steps: StepOptions | None = None,
    progress: RankProgress | None = None,
    check_cancel: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Analyse the job at ``run`` (a run dir or glob) and return the report document.
    ``check_cancel`` (see :func:`~explorer.job.engine.map_ranks`) may stop the map step."""
    from explorer import __version__

    files = job_files(run)
    store_dir = _prepare_store(run, store)
    summaries = map_ranks(
        files, store_dir, scheduler=scheduler, workers=workers, use_cache=use_cache,
        steps=steps, progress=progress, check_cancel=check_cancel,
    )  # fmt: skip
    # A corrupt, empty or foreign rank file does not sink the job: it is left out, and
    # the report says so first.
    bad = [s for s in summaries if s.error]
    summaries = [s for s in summaries if not s.error]
    if not summaries:
        raise ExplorerError(bad[0].error)
    unrelated = not_one_job(summaries)
    if unrelated:
        raise UsageError(unrelated)
    world = max([s.world_size for s in summaries] + [len(summaries) + len(bad)])
    r = _reduce_ranks(summaries, world)
    blame = rank_blame(r.wait)
    total = float(blame["total_ns"].mean()) if len(blame) else 0.0
    doc: dict[str, Any] = {
        "schema_version": JOB_SCHEMA_VERSION,
        "report": "job",
        "explorer_version": __version__,
        "run": str(run),
        "store": str(store_dir),
        "synthetic": any(s.synthetic for s in summaries),
        "devices": _devices(summaries),
        "world_size": int(world),
        "ranks_present": len(summaries),
        "steps": [int(c) for c in r.matrix.columns],
        "summary": _summary(blame, total, r.verdict, r.coll, r.unmatched),
        "ranks": _ranks(
            summaries, blame, r.offsets, r.measured, r.breakdown, r.top_findings, r.comm
        ),
        "step_matrix": {
            str(int(k)): [None if pd.isna(v) else int(v) for v in row]
            for k, row in r.matrix.iterrows()
        },
        "collectives": _collectives(r.coll, r.unmatched),
        "straggler": None if r.straggler is None else r.straggler.to_dict(),
        "imbalance": r.verdict.imbalance(),
        "warnings": [
            f"rank {s.rank} is left out: {s.error} — the job is analysed without it" for s in bad
        ]
        + [w for s in summaries for w in (f"rank {s.rank}: {x}" for x in s.warnings)]
        + r.ambiguous,
    }
    if r.straggler is not None:  # what fixing its cause buys the job (explorer.job.whatif)
        from explorer.job.whatif import straggler_what_if

        kept = [(k, f) for k, f in files if k in {s.rank for s in summaries}]
        entry = straggler_what_if(
            kept, r.straggler, list(r.verdict.startup_steps), use_cache,
            {s.rank: s for s in summaries}, steps,
        )  # fmt: skip
        if entry is not None:
            doc["straggler"]["whatif"] = entry
    if len(summaries) < world:
        doc["warnings"].append(
            f"{len(summaries)} of {world} ranks are present: the others' waits are not seen"
        )
    return doc


def _prepare_store(run: str, store: str | Path | None) -> Path:
    """The store directory for this job, emptied of this job's earlier rank tables; a
    user-named directory holding rank tables Explorer did not write is refused."""
    store_dir = Path(store) if store is not None else default_store(run)
    if store_dir.exists() and any(store_dir.glob("rank-*")):
        if store is not None and not (store_dir / "job_store.txt").exists():
            raise UsageError(
                f"--store {store_dir} holds rank tables Explorer did not write there; "
                "choose an empty or new directory"
            )
        for old in store_dir.glob("rank-*"):  # this job's earlier tables only
            shutil.rmtree(old)
    store_dir.mkdir(parents=True, exist_ok=True)
    (store_dir / "job_store.txt").write_text(f"Explorer job tables for {run}\n")
    return store_dir


@dataclass(frozen=True)
class _Reduced:
    """What the DuckDB reduce over all ranks' tables gives :func:`job_document`."""

    matrix: pd.DataFrame
    measured: pd.DataFrame
    offsets: pd.DataFrame
    coll: pd.DataFrame
    wait: pd.DataFrame
    straggler: Straggler | None
    verdict: Verdict
    unmatched: int
    ambiguous: list[str]
    breakdown: pd.DataFrame
    top_findings: pd.DataFrame
    comm: pd.DataFrame


def _reduce_ranks(summaries: list[RankSummary], world: int) -> _Reduced:
    """Step matrix, clock offsets, matched collectives, waits, straggler and per-rank
    breakdown and top findings, from the ranks' stored tables."""
    con = reduce.open_job_tables([Path(s.store_dir) for s in summaries])
    try:
        matrix = reduce.step_matrix(con)
        measured = reduce.clock_offsets(con)
        offsets = reduce.host_offsets(measured, {s.rank: s.host for s in summaries})
        reduce.register_offsets(con, offsets)
        coll = reduce.matched_collectives(con, world)
        wait = reduce.wait_by_rank_step(con)
        judged = verdict(con, wait)
        row = con.execute("SELECT count(*) FROM coll_matched WHERE n_ranks < 2").fetchone()
        unmatched = int(row[0]) if row is not None else 0  # count(*) always gives a row
        ambiguous = reduce.ambiguous_matches(con)
        breakdown = con.execute(
            "SELECT rank, category, sum(ns)::BIGINT AS ns FROM breakdown GROUP BY rank, category"
        ).df()
        comm = con.execute(
            "SELECT rank, sum(comm_ns)::BIGINT AS comm_ns, "
            "sum(comm_overlap_ns)::BIGINT AS comm_overlap_ns FROM steps GROUP BY rank"
        ).df()
        top_findings = con.execute(
            """SELECT rank, kind, title, time_lost_ns, share, file, line, function
               FROM (SELECT *, row_number() OVER (PARTITION BY rank ORDER BY time_lost_ns DESC)
                     AS k FROM findings) WHERE k <= 3 ORDER BY rank, k"""
        ).df()
    finally:
        con.close()
    return _Reduced(
        matrix=matrix, measured=measured, offsets=offsets, coll=coll, wait=wait,
        straggler=judged.straggler, verdict=judged, unmatched=unmatched, ambiguous=ambiguous, breakdown=breakdown, top_findings=top_findings,
        comm=comm,
    )  # fmt: skip


def _summary(
    blame: pd.DataFrame, total: float, v: Verdict, coll: pd.DataFrame, unmatched: int
) -> dict[str, Any]:
    n = len(blame)
    mean_step = total / max(float(blame["steps"].mean()), 1.0) if n else 0.0
    return {
        # The named straggler's cost to the others (0 when none is named), which
        # '--fail-on straggler>X%' reads, and the worst rank's lateness even when it is not
        # singled out: both medians over the steady-state steps, over the median steady
        # step (start-up steps, e.g. a first loader start or a compile, are left out).
        "straggler_share": float(v.straggler.share) if v.straggler is not None else 0.0,
        "max_late_share": float(v.share) if v.worst_rank is not None else 0.0,
        "mean_step_ns": int(mean_step),
        "steady_step_ns": int(v.step_ns),
        "startup_steps": list(v.startup_steps),
        "total_ns": int(total),
        "straggler_rank": None if v.straggler is None else int(v.straggler.rank),
        "collective_wait_share": float(blame["wait_ns"].sum()) / (total * n) if total else 0.0,
        "collectives_matched": len(coll),
        "collectives_unmatched": unmatched,
    }


def _devices(summaries: list[RankSummary]) -> dict[str, Any]:
    """The job's accelerators as the ranks' traces name them, and whether every rank
    recorded device-side time (a backend with no device timeline leaves host time only)."""
    seen = sorted({d for s in summaries for d in s.devices})
    recorded = all(s.device_time_recorded for s in summaries if s.devices)
    sentence = ""
    if seen:
        sentence = f"Devices: {', '.join(seen)}." + (
            ""
            if recorded
            else " Device-side time was not recorded on "
            + (
                "every rank"
                if not any(s.device_time_recorded for s in summaries if s.devices)
                else "some ranks"
            )  # fmt: skip
            + ": the backend wrote no device timeline, so those ranks' times are host time."
        )
    return {"devices": seen, "device_time_recorded": recorded, "sentence": sentence}


def _ranks(
    summaries: list[RankSummary],
    blame: pd.DataFrame,
    offsets: pd.DataFrame,
    measured: pd.DataFrame,
    breakdown: pd.DataFrame,
    top_findings: pd.DataFrame,
    comm: pd.DataFrame,
) -> list[dict[str, Any]]:
    b = blame.set_index("rank")
    c = comm.set_index("rank")
    o = offsets.set_index("rank")
    m = measured.set_index("rank")
    cat = breakdown.pivot_table(index="rank", columns="category", values="ns", aggfunc="sum")
    out = []
    for s in summaries:
        r = s.rank
        row_b = b.loc[r] if r in b.index else None
        mine = top_findings[top_findings["rank"] == r]
        out.append(
            {
                "rank": r,
                "source": s.source,
                "events": s.events,
                "steps": s.steps,
                "backend": s.backend,
                "devices": list(s.devices),
                "device_time_recorded": bool(s.device_time_recorded),
                "total_ns": 0 if row_b is None else int(row_b["total_ns"]),
                "wait_ns": 0 if row_b is None else int(row_b["wait_ns"]),
                "caused_wait_ns": 0 if row_b is None else int(row_b["caused_ns"]),
                "busy_ns": 0 if row_b is None else int(row_b["busy_ns"]),
                "late_ns_per_step": 0 if row_b is None else int(row_b["late_ns_per_step"]),
                "comm_ns": int(c.loc[r, "comm_ns"]) if r in c.index else 0,
                "comm_overlap_ns": int(c.loc[r, "comm_overlap_ns"]) if r in c.index else 0,
                "host": s.host,
                "clock_offset_ns": int(o.loc[r, "offset_ns"]) if r in o.index else 0,
                "collective_end_offset_ns": int(m.loc[r, "offset_ns"]) if r in m.index else 0,
                "collectives_matched_with_reference": int(o.loc[r, "matched"])
                if r in o.index
                else 0,
                "breakdown": {str(c): int(v) for c, v in cat.loc[r].items() if not pd.isna(v)}
                if r in cat.index
                else {},
                "top_findings": [
                    {
                        "kind": str(f.kind),
                        "title": str(f.title),
                        "time_lost_ns": int(f.time_lost_ns),
                        "share": float(f.share),
                        "file": str(f.file),
                        "line": int(f.line),
                        "function": str(f.function),
                    }
                    for f in mine.itertuples(index=False)
                ],
            }
        )
    return out


def _collectives(coll: pd.DataFrame, unmatched: int) -> dict[str, Any]:
    by_op = (
        coll.groupby("op")
        .agg(
            count=("key", "count"),
            bytes=("bytes", lambda b: int(b[b > 0].sum())),
            dur_ns=("dur_ns", "sum"),
            wait_ns=("wait_ns", "sum"),
            transfer_ns=("transfer_ns", "sum"),
            caused_wait_ns=("caused_wait_ns", "sum"),
        )
        .reset_index()
        if len(coll)
        else pd.DataFrame()
    )
    rows = coll.sort_values("caused_wait_ns", ascending=False, kind="stable").head(
        MAX_COLLECTIVE_ROWS
    )
    rows = rows.sort_values("start_ns", kind="stable")
    return {
        "matched": len(coll),
        "unmatched": unmatched,
        "by_op": [
            {k: (str(v) if k == "op" else 0 if pd.isna(v) else int(v)) for k, v in r.items()}
            for r in by_op.to_dict("records")
        ],
        "rows": [
            {
                "op": str(r.op),
                "name": str(r.name),
                "pg": str(r.pg),
                "key": str(r.key),
                "step": None if pd.isna(r.step) else int(r.step),
                "ranks": int(r.ranks),
                "bytes": int(r.bytes),
                "group_size": int(r.group_size),
                "start_ns": int(r.start_ns),
                "skew_ns": int(r.skew_ns),
                "dur_ns": int(r.dur_ns),
                "wait_ns": int(r.wait_ns),
                "transfer_ns": int(r.transfer_ns),
                "last_rank": int(r.last_rank),
                "caused_wait_ns": 0 if pd.isna(r.caused_wait_ns) else int(r.caused_wait_ns),
                "busbw_gbps": None if pd.isna(r.busbw_gbps) else float(r.busbw_gbps),
            }
            for r in rows.itertuples(index=False)
        ],
    }
