"""A whole job in one Perfetto trace: every rank under a process named ``rank K``, on the
aligned clock.

Each rank is written by the single-trace exporter
(:func:`explorer.export.perfetto.write_perfetto`) from its store entry (the tables the map
step already wrote), one rank after another into one file: each starts its track uuids,
flow ids and synthetic pids where the previous rank stopped, and its timestamps are shifted
by the clock offset the job report states for it (``ranks[i].clock_offset_ns``: subtracted,
as the report's own alignment does). The driver holds one rank's events at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from explorer import store
from explorer.export.perfetto import PerfettoExport, write_perfetto
from explorer.export.perfetto_tracks import IdSpace
from explorer.export.results import Results
from explorer.job.rank_map import rank_dir
from explorer.trace.model import TraceData


@dataclass
class JobExport:
    """What was written: one summary per rank, and the shift applied to each."""

    path: Path
    ranks: dict[int, PerfettoExport] = field(default_factory=dict)
    shifts_ns: dict[int, int] = field(default_factory=dict)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.ranks.values())

    @property
    def slices(self) -> int:
        return sum(s.slices for s in self.ranks.values())


def job_to_perfetto(doc: dict[str, Any], path: str | Path, *, results: bool = True) -> JobExport:
    """Write every rank of the job report ``doc`` (:func:`explorer.job.job_document`) to
    ``path``, one process group per rank, each shifted by its ``clock_offset_ns``."""
    out = JobExport(path=Path(path))
    ids = IdSpace()
    used_pids: set[int] = set()
    with open(path, "wb") as f:
        for r in doc["ranks"]:
            rank, shift = int(r["rank"]), int(r["clock_offset_ns"])
            trace = store.open_trace(rank_dir(Path(doc["store"]), rank))
            pid = _group_pid(trace, used_pids, ids.first_synthetic + rank)
            used_pids.add(pid)
            ids.group, ids.shift_ns = (f"rank {rank}", pid), shift
            summary = write_perfetto(
                f, trace, ids=ids, **({} if results else {"results": Results()})
            )
            summary.path = out.path
            out.ranks[rank] = summary
            out.shifts_ns[rank] = shift
            ids = summary.next_ids
    return out


def _group_pid(trace: TraceData, used: set[int], fallback: int) -> int:
    """The rank's own process id (its first numeric pid) unless another rank has it (two
    machines): then a synthetic one."""
    pids = trace.tracks["pid"].astype(str)
    numeric = pids[pids.str.fullmatch(r"\d+")]
    if len(numeric):
        pid = int(numeric.iat[0])
        if pid not in used:
            return pid
    return fallback
