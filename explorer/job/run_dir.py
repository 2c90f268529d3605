"""Which files make up a job: a directory of per-rank traces, a TensorBoard log dir with
several workers, or a glob (``'runs/job7/*rank*.json.gz'``).

A job is two or more timeline traces; each gets its rank from ``rank<N>`` in its name,
else its position in name order (TensorBoard's ``worker0...``, ``worker1...``). Only names
are looked at, so the driver never opens a trace; the worker that reads one warns when the
file's own ``distributedInfo`` names another rank.
"""

from __future__ import annotations

import glob
from pathlib import Path

from explorer.errors import TraceError
from explorer.readers.execution_trace import is_execution_trace
from explorer.readers.json_trace import missing_path
from explorer.readers.rank_dir import rank_of, trace_files


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
