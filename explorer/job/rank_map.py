"""The map step: read one rank, analyse it, write its tables, return a small summary.

:func:`analyse_rank` runs inside a Dask worker process. It is the only place a rank's
events are in memory; what leaves it is a store entry ``store/rank-K/``
(:func:`explorer.store.write_trace`: the trace's own tables — slices, tracks, flows... —
plus the analysis tables below, all Parquet, read back by DuckDB in the reduce step and by
``explorer sql``) and a :class:`RankSummary` of a few hundred bytes.

Analysis tables written per rank (every one has a ``rank`` column; times are absolute ns on the
rank's own clock, i.e. ``metadata["start_ns"] + ts``):

``steps``        rank, step, start_ns, end_ns, dur_ns, comm_ns, comm_overlap_ns, partial
``breakdown``    rank, step, device, category, ns           (partitions each step exactly)
``findings``     rank, kind, title, time_lost_ns, share, n_steps, file, line, function,
                 context_file, context_line, context_function (its next line in another function),
                 recommendation
``finding_steps`` rank, kind, step, ns                 (each finding's time, step by step)
``op_shapes``    rank, op, shape, numel, count, ns  (the input shapes of its heaviest
                 operators: :func:`op_shapes`, for "this rank's batch is 3x the others'")
``collectives``  rank + :data:`explorer.job.collectives.COLLECTIVE_COLUMNS`
``by_source``    rank, file, line, function, host_ns, device_ns, stall_ns
``cause_lines``  rank, category, file, line, function, ns   (the statement where each
                 breakdown category's time is spent: :func:`~explorer.analysis.cause_lines.category_lines`)
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from explorer.analysis.breakdown import breakdown, comm_overlap
from explorer.analysis.by_source import by_source
from explorer.analysis.cause_lines import category_lines
from explorer.analysis.device_naming import device_naming
from explorer.analysis.findings import findings
from explorer.analysis.steps import steps
from explorer.errors import ExplorerError
from explorer.job.collectives import rank_collectives
from explorer.readers import read
from explorer.safe_write import cannot_write
from explorer.store import write_trace
from explorer.trace.model import TraceData
from explorer.trace.step_options import StepOptions

RANK_TABLES: tuple[str, ...] = (
    "steps", "breakdown", "findings", "finding_steps", "collectives", "by_source",
    "cause_lines", "op_shapes",
)  # fmt: skip


@dataclass
class RankSummary:
    """What one worker sends back to the driver: no events, no tables."""

    rank: int
    source: str
    store_dir: str
    events: int
    steps: int
    world_size: int
    backend: str
    start_ns: int
    collectives: int
    seconds: float
    synthetic: bool = False
    host: str = ""  # the machine, where the trace says (Explorer's collector does)
    #: The rank's accelerator(s) as its trace names them (``["neuron:0"]``; [] on the CPU)
    #: and whether the trace holds device-side time (:mod:`explorer.analysis.device_naming`).
    devices: list[str] = field(default_factory=list)
    device_time_recorded: bool = True
    warnings: list[str] = field(default_factory=list)
    #: The one-line message of an :class:`ExplorerError` (an unreadable trace...), else "".
    #: Carried as text: Dask would have to pickle the exception itself.
    error: str = ""
    #: The error is this rank's trace (corrupt, empty, not a trace): the job is analysed
    #: without it. Otherwise (the store cannot be written) the job stops.
    unreadable: bool = False
    #: The capture's end on the absolute clock (0: unknown), and the rank the trace's own
    #: ``distributedInfo`` names (-1: none): what tells a job from unrelated traces
    end_ns: int = 0
    trace_rank: int = -1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rank_dir(store: Path, rank: int) -> Path:
    return store / f"rank-{rank}"


def _steps_table(trace: TraceData, rank: int) -> pd.DataFrame:
    """The rank's steps on the absolute clock, with the communication of each and the part
    of it hidden behind compute (summed over devices)."""
    base = int(trace.metadata.get("start_ns", 0))
    st = steps(trace)
    steps_t = pd.DataFrame(
        {
            "rank": np.full(len(st), rank, np.int64),
            "step": st["step"].to_numpy(np.int64),
            "start_ns": st["start_ns"].to_numpy(np.int64) + base,
            "end_ns": st["end_ns"].to_numpy(np.int64) + base,
            "dur_ns": st["dur_ns"].to_numpy(np.int64),
        }
    )
    ov = comm_overlap(trace).groupby("step")[["comm_ns", "overlap_ns"]].sum()
    ov = ov.reindex(steps_t["step"].to_numpy(), fill_value=0)
    steps_t["comm_ns"] = ov["comm_ns"].to_numpy(np.int64)
    steps_t["comm_overlap_ns"] = ov["overlap_ns"].to_numpy(np.int64)
    # a step the capture cut: the job what-if replays it but leaves it out of the step time
    steps_t["partial"] = st["partial"].to_numpy(bool)
    return steps_t


def rank_tables(trace: TraceData, rank: int) -> dict[str, pd.DataFrame]:
    """The per-rank tables (see the module doc) of one loaded trace."""
    steps_t = _steps_table(trace, rank)
    bd = breakdown(trace)
    bd_t = pd.DataFrame(
        {
            "rank": np.full(len(bd), rank, np.int64),
            "step": bd["step"].to_numpy(np.int64),
            "device": bd["device"].astype(str).to_numpy(),
            "category": bd["category"].astype(str).to_numpy(),
            "ns": bd["ns"].to_numpy(np.int64),
        }
    )
    fs = findings(trace)
    top = [f.source_lines[0] if f.source_lines else ("", -1, "") for f in fs]
    # the next line in another function, for context (an input stall's loop line beside
    # its slow read)
    nxt = [
        next(
            (
                x
                for x in f.source_lines[1:]
                if (x[0], x[2]) != (f.source_lines[0][0], f.source_lines[0][2])
            ),
            ("", -1, ""),
        )
        for f in fs
    ]
    f_t = pd.DataFrame(
        {
            "rank": np.full(len(fs), rank, np.int64),
            "kind": pd.Series([f.kind for f in fs], dtype=str),
            "title": pd.Series([f.title for f in fs], dtype=str),
            "time_lost_ns": np.array([int(f.time_lost_ns) for f in fs], np.int64),
            "share": np.array([float(f.share) for f in fs], np.float64),
            "n_steps": np.array([len(f.steps) for f in fs], np.int64),
            "file": pd.Series([str(t[0]) for t in top], dtype=str),
            "line": np.array([int(t[1]) for t in top], np.int64),
            "function": pd.Series([str(t[2]) for t in top], dtype=str),
            "context_file": pd.Series([str(t[0]) for t in nxt], dtype=str),
            "context_line": np.array([int(t[1]) for t in nxt], np.int64),
            "context_function": pd.Series([str(t[2]) for t in nxt], dtype=str),
            "recommendation": pd.Series([f.recommendation for f in fs], dtype=str),
        }
    )
    per_step = [
        (f.kind, int(st), int(ns))
        for f in fs
        for st, ns in _finding_per_step(f.details.get("per_step_ns"), f.steps, f.time_lost_ns)
    ]
    fs_t = pd.DataFrame(
        {
            "rank": np.full(len(per_step), rank, np.int64),
            "kind": pd.Series([k for k, _, _ in per_step], dtype=str),
            "step": np.array([st for _, st, _ in per_step], np.int64),
            "ns": np.array([ns for _, _, ns in per_step], np.int64),
        }
    )
    coll = rank_collectives(trace)
    coll.insert(0, "rank", np.full(len(coll), rank, np.int64))
    src = by_source(trace)
    src_t = pd.DataFrame(
        {
            "rank": np.full(len(src), rank, np.int64),
            "file": src["file"].astype(str).to_numpy(),
            "line": src["line"].to_numpy(np.int64),
            "function": src["function"].astype(str).to_numpy(),
            "host_ns": src["host_ns"].to_numpy(np.int64),
            "device_ns": src["device_ns"].to_numpy(np.int64),
            "stall_ns": src["stall_ns"].to_numpy(np.int64),
        }
    )
    lines = category_lines(trace)
    lines.insert(0, "rank", np.full(len(lines), rank, np.int64))
    shapes = op_shapes(trace)
    shapes.insert(0, "rank", np.full(len(shapes), rank, np.int64))
    return {
        "op_shapes": shapes,
        "cause_lines": lines,
        "steps": steps_t,
        "breakdown": bd_t,
        "findings": f_t,
        "finding_steps": fs_t,
        "collectives": coll,
        "by_source": src_t,
    }


#: The heaviest operators whose input shapes are compared across ranks, and at most this
#: many calls of each (their args are decoded one by one).
SHAPE_OPS = 12
SHAPE_CALLS = 400


def op_shapes(trace: TraceData) -> pd.DataFrame:
    """Per outermost host operator (the :data:`SHAPE_OPS` heaviest by time) and the shape
    of its first tensor input (``Input Dims``, recorded with ``record_shapes``): calls,
    time and the shape's element count. Empty when the trace has no shapes."""
    cols = ["op", "shape", "numel", "count", "ns"]
    s = trace.slices
    kind = s["kind"].to_numpy()
    parent = s["parent"].to_numpy(np.int64)
    is_op = (kind == "cpu_op") & trace.on_host()
    in_op = np.zeros(len(s), bool)
    has = parent >= 0
    in_op[has] = is_op[parent[has]]
    ids = np.flatnonzero(is_op & ~in_op)
    if len(ids) == 0:
        return pd.DataFrame({c: [] for c in cols})
    names = s["name"].astype(str).to_numpy()[ids]
    dur = s["dur"].to_numpy(np.int64)[ids]
    heavy = pd.Series(dur).groupby(names).sum().sort_values(ascending=False).head(SHAPE_OPS)
    rows = []
    for op in heavy.index:
        mine = ids[names == op][:SHAPE_CALLS]
        for i, dims in zip(mine, trace.arg_column("Input Dims", mine), strict=True):
            shape = next(
                (d for d in dims or [] if isinstance(d, list) and d and
                 all(isinstance(x, int) for x in d)),
                None,
            )  # fmt: skip
            if shape is not None:
                rows.append((str(op), str(shape), int(np.prod(shape)), int(s["dur"].iat[i])))
    if not rows:
        return pd.DataFrame({c: [] for c in cols})
    df = pd.DataFrame(rows, columns=["op", "shape", "numel", "ns"])
    out = df.groupby(["op", "shape", "numel"], sort=False).agg(
        count=("ns", "size"), ns=("ns", "sum")
    )
    return out.reset_index()[cols].astype({"numel": np.int64, "count": np.int64, "ns": np.int64})


def _finding_per_step(per_step: Any, steps: list[int], lost: int) -> list[tuple[int, int]]:
    """A finding's time per step: its own ``per_step_ns`` when the detector gives it,
    else its time spread evenly over its steps."""
    if isinstance(per_step, dict) and per_step:
        return [(int(k), int(v)) for k, v in per_step.items()]
    if not steps:
        return []
    each = int(lost) // len(steps)
    return [(int(st), each) for st in steps]


def analyse_rank(
    source: str, rank: int, store: str, use_cache: bool = True, steps: StepOptions | None = None
) -> RankSummary:
    """Load ``source`` as rank ``rank``, write its tables under ``store/rank-K/``.

    A problem the user can fix (:class:`ExplorerError`) comes back as ``summary.error``.
    """
    t0 = time.perf_counter()
    try:
        return _analyse(source, rank, Path(store), use_cache, steps or StepOptions(), t0)
    except CannotStore as exc:  # the store, not the rank: the job cannot go on
        return RankSummary(rank, source, "", 0, 0, -1, "", 0, 0, 0.0, error=str(exc.error))
    except ExplorerError as exc:  # this rank's trace: the job goes on without it
        return RankSummary(
            rank, source, "", 0, 0, -1, "", 0, 0, 0.0, error=str(exc), unreadable=True
        )


class CannotStore(Exception):
    """The rank's tables could not be written (a full disk...): carries the user's error."""

    def __init__(self, error: ExplorerError) -> None:
        super().__init__(str(error))
        self.error = error


def _analyse(
    source: str, rank: int, store: Path, use_cache: bool, steps: StepOptions, t0: float
) -> RankSummary:
    trace = read(source, use_cache=use_cache).with_step_options(steps)
    tables = rank_tables(trace, rank)
    try:
        out = write_trace(trace, rank_dir(store, rank), extra_tables=tables)
    except OSError as exc:  # a full disk, a store on a read-only mount
        raise CannotStore(cannot_write(rank_dir(store, rank), exc)) from None
    meta = trace.metadata
    info = meta.get("distributedInfo")
    dist: dict[str, Any] = info if isinstance(info, dict) else {}
    ours = meta.get("explorer")
    mine: dict[str, Any] = ours if isinstance(ours, dict) else {}
    found = mine.get("environment")
    env: dict[str, Any] = found if isinstance(found, dict) else {}
    naming = device_naming(trace)
    return RankSummary(
        rank=rank,
        source=str(source),
        store_dir=str(out),
        events=len(trace.slices),
        steps=len(tables["steps"]),
        world_size=int(meta.get("world_size", dist.get("world_size", -1)) or -1),
        backend=str(dist.get("backend", "")),
        start_ns=int(meta.get("start_ns", 0)),
        end_ns=int(meta.get("end_ns", 0)),
        trace_rank=int(trace.rank),
        collectives=len(tables["collectives"]),
        seconds=time.perf_counter() - t0,
        synthetic=bool(trace.synthetic),
        host=str(env.get("host", "")),
        devices=list(naming.devices),
        device_time_recorded=naming.device_time_recorded,
        warnings=[str(w) for w in meta.get("warnings", [])]
        + (
            [f"{Path(source).name} says it is rank {trace.rank}; reported as rank {rank}"]
            if 0 <= trace.rank != rank
            else []
        ),
    )
