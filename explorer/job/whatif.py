"""What if the straggler were fixed? Replay a whole job through its matched collectives.

One rank's fix moves the other ranks only through the collectives they share: a
collective ends when its last participant arrives (plus its own transfer), so a rank that
waited for the straggler waits less once the straggler arrives sooner. The model, per job:

1. **What the fix takes away.** On the changed rank, the fix removes what the
   single-trace what-if removes (:func:`explorer.analysis.whatif.resolve`: for a finding
   kind, what that kind's fix removes, :func:`~explorer.analysis.whatif.fix_mask`), taken
   as the stretches of the rank's step thread those slices cover: every point of that
   thread moves earlier by the removed time before it (its other work keeps its length).
   The single-trace graph replay (:func:`~explorer.analysis.whatif.replay_graph`) is not
   used for the times here: it lets a gloo collective run as soon as gloo's own thread is
   free (a hand-off is no dependency there), while across ranks a collective starts when
   its rank reaches it. The other ranks keep their recorded timelines.
2. **One clock.** Each rank's clock is aligned on the lowest rank's by the median
   difference of the ends of the collectives they share (a collective ends on every
   participant together; symmetric ones — all_reduce, all_gather... — only, where the
   job has any).
3. **Through the collectives, in order.** Collectives are matched per process group by
   their order in it (:func:`~explorer.job.collectives.rank_collectives` lists them; the
   same operation at the same place on every participant) and visited in recorded start
   order. A participant arrives at its recorded start moved as the last collective it
   left moved, less what the fix removed since then; the collective's last arrival moves
   by as much as the latest new arrival differs from the recorded last one, and so does every participant's end — but none
   ends sooner than its own new arrival plus the collective's transfer (its shortest
   recorded participation: the last arrival's, who waited for no one).
4. **Step times.** A step's start and end move as the last collective that ended before
   each moved, less what the fix removed since; the job's step time is the median over ranks
   and steady-state steps (start-up steps left out, as the job report's
   ``steady_step_ns``), before and after. With nothing changed every shift is 0 and each
   step keeps its recorded time exactly.

Limits: everything a rank does after a collective ends is taken to wait for it (work
that overlaps a collective and does not need its result moves with it all the same); a
collective's transfer time stays as recorded (fewer ranks waiting changes no bandwidth);
removed work that overlapped other work on the step thread's rank (a stall hidden behind
device work) counts in full, where the single-trace replay would give it less;
the other ranks' own time is kept as recorded, so noise in the recorded run (a rank
descheduled on a busy machine) stays in the prediction; collectives are matched by their
order in the group alone (one whose operation differs between ranks is left out). The driver reads each rank's trace (from the cache when it has one) one
at a time and keeps only its collectives' and steps' times.
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from explorer.errors import UsageError
from explorer.units import fmt_ns

if TYPE_CHECKING:
    from explorer.job.rank_map import RankSummary
    from explorer.trace.step_options import StepOptions

#: Operations whose collective ends on every participant together (clock alignment).
SYMMETRIC_OPS = frozenset({"allreduce", "allgather", "reducescatter", "alltoall", "barrier"})


@dataclass
class RankTimes:
    """What the job replay needs of one rank: its collectives (``pg, key, op, start, end``,
    local ns) and its steps (``step, start, end, partial``), each with the time the fix
    removes before its start and end (``cut_start, cut_end``)."""

    rank: int
    coll: pd.DataFrame
    steps: pd.DataFrame
    #: the rank's clock: local ns + ``base`` is absolute (``metadata["start_ns"]``)
    base: int = 0
    #: the machine, where the trace says (ranks on one machine share a clock)
    host: str = ""


@dataclass
class JobWhatIf:
    """A job replay's result: per rank and step ``rank, step, before_ns, after_ns``; the
    job's step time (median over ranks and steady steps) before and after."""

    rank: int
    kind: str
    steps: pd.DataFrame
    steady_steps: list[int]
    job_step_ns_before: int
    job_step_ns_after: int

    @property
    def saving_share(self) -> float:
        b = self.job_step_ns_before
        return (b - self.job_step_ns_after) / b if b else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The job report's ``whatif`` entry on the straggler."""
        return {
            "rank": int(self.rank),
            "kind": self.kind,
            "job_step_ns_before": int(self.job_step_ns_before),
            "job_step_ns_after": int(self.job_step_ns_after),
        }

    def line(self) -> str:
        """``if rank K's input stall were fixed: job step 184 ms → 121 ms (−34%)``."""
        return whatif_line(self.to_dict())


def whatif_line(entry: dict[str, Any]) -> str:
    """The one text line of a ``whatif`` entry (:meth:`JobWhatIf.to_dict`)."""
    b, a = int(entry["job_step_ns_before"]), int(entry["job_step_ns_after"])
    pct = 100.0 * (a - b) / b if b else 0.0
    sign = "−" if pct < 0 else "+"
    what = str(entry["kind"]).replace("_", " ")
    return (
        f"if rank {entry['rank']}'s {what} were fixed: job step {fmt_ns(b)} → {fmt_ns(a)} "
        f"({sign}{abs(pct):.0f}%)"
    )


def removed_intervals(trace: Any, remove: list[str] | tuple[str, ...]) -> np.ndarray:
    """The ``(start, end)`` stretches (local ns, sorted, disjoint) of the rank's step
    thread that a fix of ``remove`` takes away: the outermost of the slices the
    single-trace replay removes (:func:`~explorer.analysis.whatif.resolve`) on the thread
    that runs the steps (the thread with most of them, when the steps have no slice)."""
    from explorer.analysis.steps import steps
    from explorer.analysis.whatif import resolve

    s = trace.slices
    mask = np.zeros(len(s), bool)
    for sel in remove:
        mask |= resolve(trace, sel, 0.0).mask
    track = s["track"].to_numpy()
    sl = steps(trace)["slice"].to_numpy(np.int64)
    if len(sl) and (sl >= 0).all():
        mine = track == np.bincount(track[sl].astype(np.int64)).argmax()
    else:
        hit = track[mask & trace.on_host()]
        mine = track == (np.bincount(hit.astype(np.int64)).argmax() if len(hit) else -1)
    parent = s["parent"].to_numpy(np.int64)
    inner = np.zeros(len(s), bool)
    has = parent >= 0
    inner[has] = mask[parent[has]]
    top = np.flatnonzero(mask & mine & ~inner)
    ts = s["ts"].to_numpy(np.int64)[top]
    end = ts + s["dur"].to_numpy(np.int64)[top]
    order = np.argsort(ts, kind="stable")
    return np.stack([ts[order], end[order]], axis=1) if len(top) else np.zeros((0, 2), np.int64)


def removed_before(intervals: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per point ``x``: how much of ``intervals`` (sorted, disjoint) lies before it."""
    x = np.asarray(x, np.int64)
    if len(intervals) == 0:
        return np.zeros(len(x), np.int64)
    start, end = intervals[:, 0], intervals[:, 1]
    whole = np.concatenate([[0], np.cumsum(end - start)])
    k = np.searchsorted(start, x, side="right")  # intervals that start before x
    part = np.where(
        k > 0, np.minimum(x, end[np.maximum(k - 1, 0)]) - start[np.maximum(k - 1, 0)], 0
    )
    return (whole[np.maximum(k - 1, 0)] * (k > 0) + np.maximum(part, 0)).astype(np.int64)


def rank_times(trace: Any, rank: int, remove: list[str] | tuple[str, ...] = ()) -> RankTimes:
    """One rank's collectives and steps with their recorded times (local ns) and how much
    of the fix of ``remove`` lies before each (``cut_start``, ``cut_end``; 0 when nothing
    is removed)."""
    from explorer.analysis.steps import steps
    from explorer.job.collectives import rank_collectives

    cuts = removed_intervals(trace, remove) if remove else np.zeros((0, 2), np.int64)
    rc = rank_collectives(trace)
    coll = pd.DataFrame(
        {
            "pg": rc["pg"].to_numpy(str),
            "op": rc["op"].to_numpy(str),
            "start": rc["start_ns"].to_numpy(np.int64) - int(trace.metadata.get("start_ns", 0)),
            "end": rc["end_ns"].to_numpy(np.int64) - int(trace.metadata.get("start_ns", 0)),
        }
    )
    coll["cut_start"] = removed_before(cuts, coll["start"].to_numpy())
    coll["cut_end"] = removed_before(cuts, coll["end"].to_numpy())
    coll["key"] = coll.groupby("pg").cumcount()
    st = steps(trace)
    h0 = st["start_ns"].to_numpy(np.int64)
    h1 = st["end_ns"].to_numpy(np.int64)
    step_t = pd.DataFrame(
        {"step": st["step"].to_numpy(np.int64), "start": h0, "end": h1,
         "cut_start": removed_before(cuts, h0), "cut_end": removed_before(cuts, h1),
         "partial": st["partial"].to_numpy(bool)}
    )  # fmt: skip
    meta = trace.metadata
    ours = meta.get("explorer")
    env = ours.get("environment") if isinstance(ours, dict) else None
    host = str(env.get("host", "")) if isinstance(env, dict) else ""
    return RankTimes(rank, coll, step_t, int(meta.get("start_ns", 0)), host)


def stored_rank_times(entry: str | Path, rank: int, base: int, host: str = "") -> RankTimes:
    """:func:`rank_times` with nothing removed, read from the rank's store entry (the map
    step's ``collectives`` and ``steps`` tables, :mod:`explorer.job.rank_map`, on the
    absolute clock; ``base`` is the trace's ``start_ns``): what the replay needs of every
    rank but the one fixed, without loading and parsing its trace again in the driver."""
    from explorer.store import read_table

    rc = read_table(entry, "collectives")
    coll = pd.DataFrame(
        {
            "pg": rc["pg"].to_numpy(str),
            "op": rc["op"].to_numpy(str),
            "start": rc["start_ns"].to_numpy(np.int64) - base,
            "end": rc["end_ns"].to_numpy(np.int64) - base,
        }
    )
    coll["cut_start"] = np.zeros(len(coll), np.int64)
    coll["cut_end"] = np.zeros(len(coll), np.int64)
    coll["key"] = coll.groupby("pg").cumcount()
    st = read_table(entry, "steps")
    zero = np.zeros(len(st), np.int64)
    step_t = pd.DataFrame(
        {"step": st["step"].to_numpy(np.int64), "start": st["start_ns"].to_numpy(np.int64) - base,
         "end": st["end_ns"].to_numpy(np.int64) - base, "cut_start": zero, "cut_end": zero,
         "partial": st["partial"].to_numpy(bool)}
    )  # fmt: skip
    return RankTimes(rank, coll, step_t, base, host)


def _offsets(times: list[RankTimes], matched: pd.DataFrame) -> dict[int, int]:
    """Per rank, what to subtract from its absolute times to be on the lowest rank's
    clock (ranks on one machine share it: :func:`~explorer.job.reduce.host_offsets`)."""
    from explorer.job.reduce import host_offsets

    ref = min(t.rank for t in times)
    sym = matched[matched["op"].isin(SYMMETRIC_OPS)]
    use = sym if len(sym) else matched
    ends = use.pivot_table(index=["pg", "key"], columns="rank", values="a_end", aggfunc="first")
    out = {ref: 0}
    for t in times:
        if t.rank == ref:
            continue
        if ref in ends and t.rank in ends:
            d = (ends[t.rank] - ends[ref]).dropna()
            out[t.rank] = int(round(float(d.median()))) if len(d) else 0
        else:
            out[t.rank] = 0
    frame = pd.DataFrame({"rank": list(out), "offset_ns": list(out.values())})
    shared = host_offsets(frame, {t.rank: t.host for t in times})
    return {int(r): int(o) for r, o in zip(shared["rank"], shared["offset_ns"], strict=True)}


def propagate(times: list[RankTimes]) -> pd.DataFrame:
    """Steps 2-4 of the module doc: per rank and step ``rank, step, before_ns, after_ns,
    partial``."""
    parts = [
        t.coll.assign(rank=t.rank, a_start=t.coll["start"] + t.base, a_end=t.coll["end"] + t.base)
        for t in times
    ]
    allc = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if len(allc):
        # a collective is one on two or more ranks, the same op on each
        n = allc.groupby(["pg", "key"])["rank"].transform("nunique")
        same = allc.groupby(["pg", "key"])["op"].transform("nunique") == 1
        allc = allc[(n >= 2) & same]
    off = _offsets(times, allc) if len(allc) else {t.rank: 0 for t in times}
    # each rank's local clock to the one clock: + base - offset
    to_one = {t.rank: t.base - off[t.rank] for t in times}
    by_rank = {t.rank: t for t in times}
    # per rank: the collectives left (recorded local end, the order visited, removed time
    # before it, its new end less its recorded end), sorted by end then visit
    left: dict[int, list[tuple[int, int, int, int]]] = {t.rank: [] for t in times}

    def moved_at(rank: int, x: int, cut: int) -> int:
        """How much a point of ``rank`` at recorded ``x`` (``cut`` removed before it)
        moves: as the last collective that ended before it moved (of those that ended at
        the same time, the last visited), less what is removed in between."""
        mine = left[rank]
        k = bisect.bisect_right(mine, (x, sys.maxsize))
        if k == 0:
            return -cut
        best = mine[k - 1]
        return best[3] - (cut - best[2])

    if len(allc):
        allc = allc.assign(
            a_start=allc["start"] + allc["rank"].map(to_one),
            a_end=allc["end"] + allc["rank"].map(to_one),
        )
        first = allc.groupby(["pg", "key"])["a_start"].transform("min")
        allc = allc.assign(first=first).sort_values(["first", "pg", "key", "rank"])
        for _, g in allc.groupby(["first", "pg", "key"], sort=True):
            last = int(g["a_start"].max())
            quickest = int((g["a_end"] - g["a_start"]).min())  # the transfer, after the last
            arrive = [
                int(r.a_start) + moved_at(int(r.rank), int(r.start), int(r.cut_start))
                for r in g.itertuples()
            ]
            moved = max(arrive) - last
            for r, a2 in zip(g.itertuples(), arrive, strict=True):
                new_end = max(int(r.a_end) + moved, a2 + quickest)
                mine = left[int(r.rank)]
                bisect.insort(mine, (int(r.end), len(mine), int(r.cut_end), new_end - int(r.a_end)))
    rows = []
    for rank, t in by_rank.items():
        for r in t.steps.itertuples():
            a0 = int(r.start) + moved_at(rank, int(r.start), int(r.cut_start))
            a1 = int(r.end) + moved_at(rank, int(r.end), int(r.cut_end))
            rows.append((rank, int(r.step), int(r.end - r.start), a1 - a0, bool(r.partial)))
    return pd.DataFrame(rows, columns=["rank", "step", "before_ns", "after_ns", "partial"])


def job_what_if(
    files: list[tuple[int, Path]],
    rank: int,
    remove: list[str] | tuple[str, ...],
    startup_steps: list[int] | None = None,
    use_cache: bool = True,
) -> JobWhatIf:
    """Replay the job of ``files`` (``(rank, trace file)``, as
    :func:`~explorer.job.run_dir.job_files` lists them) with ``remove`` removed on
    ``rank`` (see the module doc). ``startup_steps``: the steps the job's step time leaves
    out (None: :func:`~explorer.job.straggler.startup_steps` of the recorded steps)."""
    ranks = [r for r, _ in files]
    if rank not in ranks:
        raise UsageError(
            f"--rank {rank}: the job has no such rank (ranks: {', '.join(map(str, ranks))})"
        )
    if not remove:
        raise UsageError("name what to fix on that rank: --remove SELECTOR")
    return _replay_job(files, rank, remove, startup_steps, use_cache)


def job_step_ns(files: list[tuple[int, Path]], use_cache: bool = True) -> int:
    """The job's recorded step time: the median over ranks and steady-state steps (the
    figure a :class:`JobWhatIf` predicts, measured)."""
    return _replay_job(files, -1, (), None, use_cache).job_step_ns_before


def _replay_job(
    files: list[tuple[int, Path]],
    rank: int,
    remove: list[str] | tuple[str, ...],
    startup_steps: list[int] | None,
    use_cache: bool,
    stored: Mapping[int, RankSummary] | None = None,
    step_options: StepOptions | None = None,
) -> JobWhatIf:
    import explorer
    from explorer.job.straggler import startup_steps as leading

    times = []
    for r, f in files:  # one rank's events in memory at a time
        done = (stored or {}).get(r)
        if r != rank and done is not None and done.store_dir:
            # nothing removed on this rank: its map step's tables say all the replay needs
            times.append(stored_rank_times(done.store_dir, r, done.start_ns, done.host))
            continue
        trace = explorer.load(str(f), use_cache=use_cache).data
        if step_options is not None:
            trace = trace.with_step_options(step_options)
        times.append(rank_times(trace, r, remove if r == rank else ()))
        del trace
    table = propagate(times)
    start = (
        leading(table.rename(columns={"before_ns": "dur_ns"}))
        if startup_steps is None
        else list(startup_steps)
    )
    steady = table[~table["step"].isin(start) & ~table["partial"]]
    if not len(steady):
        steady = table
    return JobWhatIf(
        rank=rank,
        kind="+".join(remove),
        steps=table,
        steady_steps=sorted(int(x) for x in steady["step"].unique()),
        job_step_ns_before=int(steady["before_ns"].median()) if len(steady) else 0,
        job_step_ns_after=int(steady["after_ns"].median()) if len(steady) else 0,
    )


def straggler_what_if(
    files: list[tuple[int, Path]],
    straggler: Any,
    startup_steps: list[int],
    use_cache: bool = True,
    stored: Mapping[int, RankSummary] | None = None,
    step_options: StepOptions | None = None,
) -> dict[str, Any] | None:
    """The job report's ``whatif`` entry for a :class:`~explorer.job.straggler.Straggler`:
    its first cause that is a finding kind a fix can remove, replayed over the job; None
    when it has none (or its trace has nothing of that kind to remove). ``stored``: the
    map step's summaries by rank — every rank but the straggler is read from its store
    entry, so only the straggler's trace is loaded again (in the driver, one at a time:
    loading them all made the report's end serial, as long at 2 workers as at 1)."""
    from explorer.analysis.detectors import FINDING_KINDS

    kinds = [c.what for c in straggler.causes if c.source == "finding" and c.what in FINDING_KINDS]
    if not kinds:
        return None
    rank = int(straggler.rank)
    if rank not in {r for r, _ in files}:
        return None
    try:  # a selector the trace has nothing for
        result = _replay_job(
            files, rank, [kinds[0]], startup_steps, use_cache, stored, step_options
        )
    except UsageError:
        return None
    return result.to_dict()


def slowed_vs_balanced(result: JobWhatIf) -> tuple[int, int]:
    """For a job run with ``make_job_traces.py --alternate`` (the cause in even steps only):
    the predicted step of its slowed steps with the fix and the measured step of its
    balanced ones (medians over ranks and steady-state steps, the first step left out)."""
    t = result.steps
    t = t[t["step"].isin(result.steady_steps) & (t["step"] >= 1)]
    slowed = t[t["step"] % 2 == 0]["after_ns"]
    balanced = t[t["step"] % 2 == 1]["before_ns"]
    return int(slowed.median()), int(balanced.median())
