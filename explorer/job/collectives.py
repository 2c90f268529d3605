"""One rank's collectives: what ran, when, how many bytes, in which process group.

This is the map side of collective matching: each rank lists its own collectives in a
table that the reduce side (:mod:`explorer.job.reduce`) joins across ranks. Which slices
are "the collective" depends on what the trace has, in this order:

1. device collectives (``kind == "collective"`` on a device track: NCCL/RCCL kernels);
2. gloo's own execution ranges (``gloo:all_reduce``... on gloo's run-loop threads): on CPU,
   ``c10d::allreduce_`` on the main thread only enqueues the work;
3. otherwise the outermost host slices whose name is a collective (``c10d::...``).

Size, process group and sequence number come from the slice's args where the profiler
wrote them (``record_param_comms``-style ``In msg nelems`` + ``dtype``, or ``Input Dims`` +
``Input type``; ``Process Group Name``; ``Seq``); unknown values are -1 / ``""``. Gloo's
execution ranges carry no group: the group is the one whose run-loop thread ran the range
(:func:`gloo_thread_groups`, from ``distributedInfo.pg_config``).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from explorer.analysis.classify import classes
from explorer.analysis.slice_steps import slice_steps
from explorer.trace.model import TraceData

COLLECTIVE_COLUMNS = [
    "op", "name", "pg", "seq", "start_ns", "end_ns", "dur_ns", "bytes", "group_size",
    "step", "slice",
]  # fmt: skip

#: Normalised collective operations, searched in this order in a lower-cased name with
#: ``_`` and spaces removed (so ``reduce_scatter`` is not read as ``reduce``).
OPS: tuple[str, ...] = (
    "allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "sendrecv",
    "send", "recv", "barrier", "reduce", "gather", "scatter",
)  # fmt: skip

_DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2,
    "bfloat16": 2, "c10::half": 2, "c10::bfloat16": 2, "long": 8, "int64": 8, "int": 4,
    "int32": 4, "short": 2, "int16": 2, "char": 1, "int8": 1, "unsigned char": 1, "uint8": 1,
    "byte": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
}  # fmt: skip


def op_of(name: str) -> str:
    """``"ncclKernel_AllReduce_RING_LL_Sum_float(...)"`` → ``"allreduce"``; else ``"other"``."""
    flat = re.sub(r"[\s_]", "", name.split("(")[0].lower())
    flat = flat.removeprefix("nccldevkernel").removeprefix("ncclkernel")
    for op in OPS:
        if op in flat:
            return op
    return "other"


def collective_slices(trace: TraceData) -> np.ndarray:
    """Ids of the slices that stand for this rank's collectives (see the module doc)."""
    s = trace.slices
    kind = s["kind"].to_numpy()
    device_tracks = trace.tracks["id"].to_numpy()[
        trace.tracks["type"].to_numpy() == "device_stream"
    ]
    dev = np.isin(s["track"].to_numpy(), device_tracks)
    ids = np.flatnonzero((kind == "collective") & dev)
    if len(ids):
        return ids
    names = s["name"].cat.categories.astype(str)
    codes = s["name"].cat.codes.to_numpy()
    gloo = np.fromiter((n.startswith("gloo:") for n in names), bool, len(names))
    row = np.zeros(len(s), bool)
    row[codes >= 0] = gloo[codes[codes >= 0]]
    ids = np.flatnonzero(row & ~dev)
    if len(ids):
        return ids
    row = classes(trace).host_collective & (s["name"].to_numpy() != "record_param_comms")
    parent = s["parent"].to_numpy()
    nested = np.zeros(len(s), bool)
    has_parent = parent >= 0
    nested[has_parent] = row[parent[has_parent]]
    return np.flatnonzero(row & ~nested)


def _bytes_of(args: dict[str, Any]) -> int:
    n = args.get("In msg nelems")
    dtype = args.get("dtype")
    if isinstance(n, int) and isinstance(dtype, str):
        return n * _DTYPE_BYTES.get(dtype.lower(), 0) or -1
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list):
        return -1
    total = 0
    for d, t in zip(dims, types, strict=False):
        size = _DTYPE_BYTES.get(str(t).lower())
        if size is None or not isinstance(d, list):
            continue
        shapes = d if d and isinstance(d[0], list) else [d]  # a TensorList: one shape each
        for shape in shapes:
            if shape and all(isinstance(x, int) for x in shape):
                total += int(np.prod(shape)) * size
    return total or -1


def member_groups(trace: TraceData) -> list[tuple[str, int]]:
    """The process groups this rank belongs to, in creation order, as ``(name, size)``,
    from the trace's ``distributedInfo.pg_config`` (empty when it has none)."""
    found = trace.metadata.get("distributedInfo")
    info: dict[str, Any] = found if isinstance(found, dict) else {}
    config = info.get("pg_config")
    if not isinstance(config, list):
        return []
    rank = trace.rank if trace.rank >= 0 else int(info.get("rank", -1))
    out = []
    for g in config:
        if not isinstance(g, dict):
            continue
        ranks = g.get("ranks")
        if isinstance(ranks, list) and rank in ranks:
            out.append((str(g.get("pg_name", "")), int(g.get("pg_size", len(ranks)))))
    return out


def gloo_thread_groups(trace: TraceData, tracks: np.ndarray) -> list[tuple[str, int]] | None:
    """For gloo execution ranges on ``tracks``: the ``(group name, size)`` of each.

    Gloo gives every process group its own run-loop threads (two by default), started as
    the group is created. So the rank's gloo threads, in thread-id order, fall to its
    groups in creation order (:func:`_group_starts`). None when that cannot be told (no
    ``pg_config``, another backend): the caller then matches without groups."""
    groups = member_groups(trace)
    if not groups or len(tracks) == 0:
        return None
    t = trace.tracks.set_index("id")
    used = sorted(set(int(x) for x in tracks))
    # (the threads are gloo's because they ran gloo's ranges: the profiler names some of
    # them "python")
    tids = pd.to_numeric(t.loc[used, "tid"], errors="coerce")
    if tids.isna().any() or len(used) < len(groups):
        return None
    tids = tids.sort_values(kind="stable")
    order = tids.index.to_list()
    cut = _group_starts(tids.to_numpy(np.int64), len(groups))
    if cut is None:
        return None
    index = np.searchsorted(cut, np.arange(len(order)), side="right") - 1
    group_of = {int(tr): groups[int(k)] for tr, k in zip(order, index, strict=True)}
    return [group_of[int(x)] for x in tracks]


def _group_starts(tids: np.ndarray, n: int) -> np.ndarray | None:
    """Where each of ``n`` groups' threads start among sorted thread ids: a group's
    threads are started together, so they are consecutive ids, and the next group's come
    after a gap (other threads started meanwhile) — the ``n - 1`` gaps wider than 2 —
    else, with as many threads per group, an even split. None when neither holds (a
    thread that ran nothing in the trace, groups made back to back)."""
    if n == 1:
        return np.array([0])
    gaps = np.diff(tids)
    wide = np.flatnonzero(gaps > 2)
    if len(wide) == n - 1:
        return np.concatenate([[0], wide + 1])
    if len(tids) % n == 0:
        return np.arange(0, len(tids), len(tids) // n)
    return None


def rank_collectives(trace: TraceData) -> pd.DataFrame:
    """One row per collective this rank ran, in start order (columns: ``COLLECTIVE_COLUMNS``).

    Times are absolute ns on this rank's clock (``metadata["start_ns"] + ts``), so the reduce
    side can compare ranks. ``step`` is the collective's step (a device collective's is its
    launch's: :func:`explorer.analysis.slice_steps.slice_steps`), -1 if none.
    """
    ids = collective_slices(trace)
    s = trace.slices
    base = int(trace.metadata.get("start_ns", 0))
    ts = s["ts"].to_numpy()[ids]
    dur = s["dur"].to_numpy()[ids]
    order = np.argsort(ts, kind="stable")
    ids, ts, dur = ids[order], ts[order], dur[order]
    names = s["name"].to_numpy()[ids].astype(str)
    args = [trace.args(i) for i in ids]  # collectives only: hundreds, not millions
    ops = [str(a.get("Collective name") or "") for a in args]
    ops = [op_of(a) if a else op_of(n) for a, n in zip(ops, names, strict=True)]
    pg = [str(a.get("Process Group Name", a.get("pg_name", "")) or "") for a in args]
    seq = [a.get("Seq", a.get("seq_id", -1)) for a in args]
    group = [a.get("Group size", -1) for a in args]
    gloo = len(names) > 0 and all(n.startswith("gloo:") for n in names)
    by_thread = gloo_thread_groups(trace, s["track"].to_numpy()[ids]) if gloo else None
    if by_thread is not None:  # gloo's run-loop threads say which group ran each one
        pg = [p or name for p, (name, _) in zip(pg, by_thread, strict=True)]
        group = [g if isinstance(g, int) and g > 0 else size
                 for g, (_, size) in zip(group, by_thread, strict=True)]  # fmt: skip
    step = slice_steps(trace)[ids]
    return pd.DataFrame(
        {
            "op": pd.Series(ops, dtype=str),
            "name": pd.Series(names, dtype=str),
            "pg": pd.Series(pg, dtype=str),
            "seq": np.array([int(x) if isinstance(x, int) else -1 for x in seq], np.int64),
            "start_ns": ts.astype(np.int64) + base,
            "end_ns": (ts + dur).astype(np.int64) + base,
            "dur_ns": dur.astype(np.int64),
            "bytes": np.array([_bytes_of(a) for a in args], np.int64),
            "group_size": np.array([int(g) if isinstance(g, int) else -1 for g in group], np.int64),
            "step": step,
            "slice": ids.astype(np.int64),
        },
        columns=COLLECTIVE_COLUMNS,
    )
