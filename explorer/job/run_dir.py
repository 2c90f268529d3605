"""Which files make up a job: a directory of per-rank traces, a TensorBoard log dir with
several workers, or a glob (``'runs/job7/*rank*.json.gz'``).

A job is two or more timeline traces; each gets its rank from ``rank<N>`` in its name,
else its position in name order (TensorBoard's ``worker0...``, ``worker1...``). Only names
are looked at, so the driver never opens a trace; the worker that reads one warns when the
file's own ``distributedInfo`` names another rank.
"""

from __future__ import annotations

import glob
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from explorer.errors import TraceError
from explorer.readers.execution_trace import is_execution_trace
from explorer.readers.json_trace import missing_path
from explorer.readers.rank_dir import rank_of, trace_files

if TYPE_CHECKING:
    from explorer.job.rank_map import RankSummary


def is_glob(text: str) -> bool:
    return any(c in text for c in "*?[")


def job_files(run: str) -> list[tuple[int, Path]]:
    """``(rank, file)`` for every rank of the job at ``run``, by rank.

    Ranks come from file names (``rank<N>``/``rank-N``); files without one are numbered
    after the highest named rank, in name order. Raises :class:`TraceError` when ``run``
    holds fewer than two traces or two files claim one rank.
    """
    if is_glob(run):
        files = sorted(Path(p) for p in glob.glob(run) if Path(p).is_file())
        where = Path(run).parent
        if not files:
            raise TraceError(run, "the pattern matches no files", "check the glob (quote it)")
    else:
        where = Path(run)
        if not where.exists():
            raise missing_path(where)
        if not where.is_dir():
            raise TraceError(
                where, "a job report needs a directory of per-rank traces or a glob",
                "give the run directory, or use 'explorer report FILE' for one rank",
            )  # fmt: skip
        files = trace_files(where)
    files = [f for f in files if not is_execution_trace(f)]
    if len(files) < 2:
        raise TraceError(
            where, f"a job needs two or more rank traces; found {len(files)}",
            "point at the directory that holds one trace per rank",
        )  # fmt: skip
    named = [(rank_of(f), f) for f in files]
    seen: dict[int, Path] = {}
    for r, f in named:
        if r >= 0:
            if r in seen:
                raise TraceError(
                    f, f"rank {r} also comes from {seen[r].name}",
                    "keep one trace per rank in the run directory (or pass a glob)",
                )  # fmt: skip
            seen[r] = f
    next_rank = max(seen, default=-1) + 1
    out = dict(seen)
    for r, f in named:
        if r < 0:
            out[next_rank] = f
            next_rank += 1
    return sorted(out.items())


#: The ranks of one job record at the same time: captures further apart than this (on
#: clocks that may differ by NTP's error between machines) are different runs.
SAME_TIME_SLACK_NS = 60 * 10**9


def not_one_job(ranks: Sequence[RankSummary]) -> str:
    """Why these ranks' traces (read, not left out) are not one job, in one line, or "".

    They are not when they name different world sizes, when two say they are the same
    rank of a job, when none records a ``torch.distributed`` job (world size above 1) nor
    any collective (separate single-process runs), or when their captures do not overlap
    in time (:data:`SAME_TIME_SLACK_NS`). Different hosts alone are a multi-node job."""
    if len(ranks) < 2:
        return ""
    name = {r.rank: Path(r.source).name for r in ranks}
    sizes: dict[int, int] = {}
    for r in ranks:
        if r.world_size > 0:
            sizes.setdefault(r.world_size, r.rank)
    if len(sizes) > 1:
        (a, ra), (b, rb) = sorted(sizes.items())[:2]
        return (
            f"these traces are not one job: {name[ra]} records world size {a} and "
            f"{name[rb]} world size {b}; give the directory of one run"
        )
    if all(r.world_size <= 1 for r in ranks) and not any(r.collectives for r in ranks):
        return (
            f"these {len(ranks)} traces are separate single-process runs, not one job (none "
            "records a torch.distributed world size above 1 or a collective): open each "
            "with 'explorer report FILE'"
        )
    if len(sizes) == 1 and next(iter(sizes)) > 1:
        claimed: dict[int, int] = {}
        for r in ranks:
            if r.trace_rank >= 0:
                if r.trace_rank in claimed:
                    return (
                        f"these traces are not one job: {name[claimed[r.trace_rank]]} and "
                        f"{name[r.rank]} both record that they are rank {r.trace_rank}; "
                        "give the directory of one run"
                    )
                claimed[r.trace_rank] = r.rank
    timed = [r for r in ranks if r.start_ns > 0 and r.end_ns >= r.start_ns]
    if len(timed) >= 2:
        first_end = min(timed, key=lambda r: r.end_ns)
        last_start = max(timed, key=lambda r: r.start_ns)
        if last_start.start_ns - first_end.end_ns > SAME_TIME_SLACK_NS:

            def at(ns: int) -> str:
                return datetime.fromtimestamp(ns / 1e9, timezone.utc).strftime(
                    "%Y-%m-%d %H:%M:%S UTC"
                )

            return (
                f"these traces are not one job: {name[first_end.rank]} was captured until "
                f"{at(first_end.end_ns)}, {name[last_start.rank]} from "
                f"{at(last_start.start_ns)}; the ranks of one run record at the same time"
            )
    return ""
