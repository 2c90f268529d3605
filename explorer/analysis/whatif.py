"""What if it were fixed? Replay the dependency graph with chosen slices removed or sped up.

The replay keeps every dependency the trace records (a thread's own order, launches, stream
order, syncs, events, forward -> backward, data, the runtime lock) and moves each point (the
start or end of a slice) to the earliest time they allow:

    t'(v) = max over the edges u -> v of  t'(u) + w'(u -> v)

What each edge keeps, ``w'``:

- a slice's own time (``duration``, ``nest``, ``sibling``) is work: it is kept, times the
  slice's factor (0 when removed) — except the own time of a call that waits (a sync call, a
  launch blocked on a full queue: the graph's ``sync``/``queue`` edges end there) and a
  waiting stretch (``backward()`` while the autograd engine's thread runs, a step while
  gloo's threads run its collectives: a ``handback`` edge ends it, see
  :mod:`~explorer.analysis.graph.thread_edges`), which are as long as the wait makes them.
  The hand-back is then the dependency (the ``handoff`` into the work elsewhere is none:
  that work runs on its own chain);
- of the other edges into a point (gaps on a thread, launch delays, stream gaps, waits) the
  one that set the point's time — the latest ``t(u) + m`` with ``m`` the work above — keeps
  its recorded time: that is the point's *lead time* (idle time on a thread that no
  dependency explains stays idle; a kernel that started 6 µs after its launch still does;
  a sync returns as long after the device finished as it did); the others keep none, so a
  dependency that did not hold the point back may take over when the binding one moves.

With nothing changed every edge keeps its recorded weight, and every weight is the time
between its two points, so the replay gives back the recorded timeline exactly. With
speed-ups only (factors in ``[0, 1]``), ``w' <= w`` on every edge, and ``t'(v) = t(v) -
S(v)`` where ``S(v)`` is the least total ``w - w'`` over the routes from a point with no
dependency (which keeps its time) to ``v``: one Dijkstra over the event-point graph
(``scipy.sparse.csgraph``, C speed on millions of points), as the critical path's search.

Each step's new time is its attributed window over the moved slices
(:func:`~explorer.analysis.steps.attributed_windows`); its new critical path is the
critical path of the moved graph (:func:`~explorer.analysis.critical_path.path_through`).

A finding's fix (:func:`fix_mask`) is what it names removed: the input pipeline of an
input stall (its work done ahead, in the background), the syncs of a sync stall, the
compile spans of a compile finding, the collectives of exposed communication (the bound
of overlapping them), the launch calls of a launch-bound trace, else the finding's
evidence slices.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from explorer.analysis.attribution import launcher
from explorer.analysis.classify import classes
from explorer.analysis.critical_path import (
    SCIPY_INIT_BYTES,
    CriticalPath,
    in_pair_order,
    path_through,
    type_codes,
)
from explorer.analysis.dependency_graph import DependencyGraph, dependency_graph, scope_label
from explorer.analysis.finding import Finding
from explorer.analysis.graph.edges import EDGE_TYPES
from explorer.analysis.graph.host_edges import launch_call_mask
from explorer.analysis.graph.nodes import id_dtype
from explorer.analysis.steps import attributed_windows, steps
from explorer.errors import UsageError
from explorer.trace.memo import memoised
from explorer.trace.memory_limits import ensure_room, release_freed_memory
from explorer.trace.model import TraceData
from explorer.trace.order import lexsort
from explorer.units import fmt_ns

#: The class of slices (:func:`~explorer.analysis.classify.classes`) a finding's fix
#: removes; kinds not listed remove their evidence slices.
FIX_CLASSES: dict[str, str] = {
    "input_stall": "input_root",
    "sync_stall": "host_sync",
    "compile": "compile",
    # overlapped perfectly with compute, a collective costs the step nothing: the bound
    "communication": "collective",
}
#: Kinds whose fix takes host time away but runs the same device work: fewer or cheaper
#: launches (CUDA graphs, fusion), runtime calls out of the hot loop.
FIX_KEEPS_DEVICE: frozenset[str] = frozenset({"launch_bound", "runtime_stall"})
#: A finding whose predicted saving is under this share of its time lost says why.
OVERLAP_NOTE_SHARE = 0.5

_OWN = tuple(EDGE_TYPES.index(t) for t in ("duration", "nest", "sibling"))
_WAITS = tuple(EDGE_TYPES.index(t) for t in ("sync", "queue", "cross_stream"))
_HANDOFF = EDGE_TYPES.index("handoff")
_HANDBACK = EDGE_TYPES.index("handback")


@dataclass(frozen=True)
class Change:
    """One selector resolved: the slices it reaches (``mask``, over all slice ids: the
    matched slices, everything nested in them and the device work they launched) and the
    factor their own time is scaled by (0: removed)."""

    selector: str
    factor: float
    mask: np.ndarray = field(repr=False)

    @property
    def count(self) -> int:
        return int(np.count_nonzero(self.mask))


@dataclass
class WhatIf:
    """A replay's result. ``steps``: ``step, before_ns, after_ns, saving_ns, partial``
    (attributed step windows, as every verb's step time). ``path``: the critical path of
    the moved timeline over all steps. ``ts``/``end``: every slice's moved times."""

    changes: list[Change]
    steps: pd.DataFrame
    ts: np.ndarray = field(repr=False)
    end: np.ndarray = field(repr=False)
    path: CriticalPath | None = field(default=None, repr=False)

    @property
    def saving_ns(self) -> int:
        """Time saved over the whole steps (partial ones left out, unless all are)."""
        return int(_counted(self.steps)["saving_ns"].sum())

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "changes": [
                {"selector": c.selector, "factor": c.factor, "slices": c.count}
                for c in self.changes
            ],
            "steps": [
                {
                    "step": int(r.step),
                    "before_ns": int(r.before_ns),
                    "after_ns": int(r.after_ns),
                    "saving_ns": int(r.saving_ns),
                    "partial": bool(r.partial),
                }
                for r in self.steps.itertuples()
            ],
            "saving_ns": self.saving_ns,
        }
        if self.path is not None:
            out["critical_path"] = self.path.to_dict()
        return out


def _counted(table: pd.DataFrame) -> pd.DataFrame:
    whole = ~table["partial"].to_numpy(bool)
    return table[whole] if whole.any() else table


# -- the replay ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Prepared:
    """What a replay of one graph needs whatever changes (see :func:`prepare`): edges as
    point ids ``u -> v`` with their recorded weight ``w`` and the least ``m`` each keeps
    when it did not set its point's time, who owns each (``owner``, ``mine``: a slice's own
    time), and the edges in the order that picks each point's binding edge; ``by_pair``:
    the same edges by ``(u, v)``, the layout of the search's matrix (None where two edges
    join one pair: each replay then lays it out itself)."""

    graph: DependencyGraph
    u: np.ndarray
    v: np.ndarray
    t: np.ndarray
    w: np.ndarray
    m: np.ndarray
    owner: np.ndarray
    mine: np.ndarray
    waits: np.ndarray
    dst: np.ndarray
    order: np.ndarray
    by_pair: np.ndarray | None = None


def prepare(graph: DependencyGraph) -> Prepared:
    """The factor-independent part of a replay, once per graph (a report replays it once
    per finding)."""
    arrays = graph.arrays
    assert arrays is not None  # dependency_graph always fills it
    nodes = graph.nodes
    e = graph.edges
    code = type_codes(e)
    # Narrow where the ids fit: the graph's own int32 destinations (not an int64 copy) and
    # edge positions as int32 — held through every replay of the report's child, three
    # per-edge int64 arrays were 38 MB of its peak on a 1.6M-edge graph.
    dst = e["dst"].to_numpy()
    w = e["weight"].to_numpy(np.int64)
    # The same point ids and owners the critical path of this graph reads: computed once.
    u, v = graph.point_edges()
    t = np.empty(2 * len(nodes), np.int64)
    t[0::2], t[1::2] = arrays.ts[nodes], arrays.end[nodes]
    own = _code_in(code, _OWN)
    owner = graph.edge_owners()
    blocked = arrays.kind_in(("sync",))
    blocked[dst[_code_in(code, _WAITS[:2])]] = True
    mine = own & (owner >= 0)
    work = mine & ~blocked[np.maximum(owner, 0)]
    # A waiting stretch (a hand-back ends it: the thread recorded nothing while another
    # worked) is no work of its own either: it ends when what it waited for lets it.
    joined = np.zeros(len(t), bool)
    joined[v[code == _HANDBACK]] = True
    work &= ~joined[v]
    m = np.where(work, w, 0)
    # A hand-off into work elsewhere is no dependency (that work runs on its own chain).
    # The others by point, the latest t(u) + m first: a point's first kept edge set it.
    k = np.flatnonzero(code != _HANDOFF).astype(id_dtype(len(e)))
    order = k[lexsort((-(t[u[k]] + m[k]), v[k]))]  # packed: nearly in order already
    # Every replay's search runs over a subset of these edges: sorted by pair once here,
    # a replay lays its matrix out directly (no sort, no COO conversion per finding).
    # (A graph's edges come in pair order, each pair once: then so does any subset of them.)
    by_pair: np.ndarray | None = k
    if not in_pair_order(u[k], v[k]):
        by_pair = k[np.argsort(u[k].astype(np.int64) * (len(t) + 1) + v[k], kind="stable")]
        same = (u[by_pair][1:] == u[by_pair][:-1]) & (v[by_pair][1:] == v[by_pair][:-1])
        if same.any():
            by_pair = None
    waits = _code_in(code, _WAITS)
    return Prepared(graph, u, v, t, w, m, owner, mine, waits, dst, order, by_pair)


def _code_in(code: np.ndarray, wanted: tuple[int, ...]) -> np.ndarray:
    """Whether each edge type code is one of ``wanted`` (a lookup, not ``np.isin``)."""
    table = np.zeros(len(EDGE_TYPES) + 1, bool)
    table[list(wanted)] = True
    out: np.ndarray = table[code]
    return out


def replay_graph(
    graph: DependencyGraph | Prepared, factor: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Every slice's ``(ts, end)`` after the replay (see the module doc) with each slice's
    own time scaled by ``factor`` (per slice id, in ``[0, 1]``; None: nothing changed).
    Slices that are no node of the graph keep their times."""
    p = graph if isinstance(graph, Prepared) else prepare(graph)
    arrays = p.graph.arrays
    assert arrays is not None
    nodes = p.graph.nodes
    if len(nodes) == 0:
        return arrays.ts.copy(), arrays.end.copy()
    if factor is None:
        factor = np.ones(arrays.n)
    if len(factor) and (factor.min() < 0 or factor.max() > 1):
        raise UsageError("a what-if replay takes speed-ups only: factors from 0 to 1")
    # A removed wait waits for nothing.
    keep = np.ones(len(p.w), bool)
    keep[p.waits] = factor[p.dst[p.waits]] != 0
    order = p.order[keep[p.order]]
    first = order[np.r_[True, p.v[order][1:] != p.v[order][:-1]]] if len(order) else order
    binding = np.zeros(len(p.w), bool)
    binding[first] = True
    del first
    kept = np.where(binding, p.w, p.m).astype(np.float64)
    del binding
    kept *= np.where(p.mine, factor[np.maximum(p.owner, 0)], 1.0)
    new_w = np.rint(kept, out=kept).astype(np.int64)
    del kept
    # Only the search's inputs stay alive through it (a report replays a 1.6M-edge graph
    # once per fix: every full-size temporary held here adds to the report's peak).
    by_pair = p.by_pair is not None
    laid = p.by_pair[keep[p.by_pair]] if p.by_pair is not None else order
    del keep, order
    # Handed over, not kept here: the search frees them once its matrix is laid out.
    edges = [p.u[laid], p.v[laid], p.w[laid] - new_w[laid]]
    del laid, new_w
    saved = _least_cost(len(p.t), edges, by_pair=by_pair)
    new_t = p.t - saved
    del saved
    ts, end = arrays.ts.copy(), arrays.end.copy()  # made after the search, not held through it
    ts[nodes], end[nodes] = new_t[0::2], new_t[1::2]
    return ts, end


def _least_cost(n: int, edges: list[np.ndarray], by_pair: bool = False) -> np.ndarray:
    """Per point, the least total cost of a route to it from a point with no edge in (0
    for those, and for points no such route reaches). ``edges``: ``[u, v, cost]``, emptied
    here (the caller's references go with it, so they are freed before the search).
    ``by_pair``: the edges come sorted by ``(u, v)`` with no pair twice — the search's
    matrix as the sort below would lay it out, built directly."""
    u, v, cost = edges
    edges.clear()
    out = np.zeros(n, np.int64)
    if len(u) == 0 or not (cost > 0).any():
        return out
    if "scipy.sparse.csgraph" not in sys.modules:
        ensure_room(SCIPY_INIT_BYTES)
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import dijkstra

    has_in = np.zeros(n, bool)
    has_in[v] = True
    roots = np.flatnonzero(~has_in)
    source = n
    if by_pair:
        data = np.concatenate([cost, np.zeros(len(roots))], dtype=np.float64)
        np.maximum(data, np.finfo(np.float64).tiny, out=data)
        index = id_dtype(n + len(u) + len(roots))  # holds every point and stored edge
        indptr = np.zeros(n + 2, index)  # in the matrix's index type: no int64 copy of it
        np.cumsum(np.bincount(u, minlength=n + 1), out=indptr[1:])
        indptr[-1] += len(roots)
        cols_sorted = np.concatenate([v, roots], dtype=index, casting="same_kind")
        del has_in, roots, u, v, cost
        laid = csr_matrix((data, cols_sorted, indptr), shape=(n + 1, n + 1))
        del data, cols_sorted, indptr  # the matrix's now
        # the replay's freed temporaries given back before the search maps its own
        release_freed_memory()
        dist = dijkstra(laid, directed=True, indices=source)[:n]
        ok = np.isfinite(dist)
        out[ok] = np.rint(dist[ok]).astype(np.int64)
        return out
    rows = np.concatenate([u, np.full(len(roots), source)])
    cols = np.concatenate([v, roots])
    data = np.concatenate([cost, np.zeros(len(roots), np.int64)]).astype(np.float64)
    # csr_matrix adds up duplicate pairs: keep the cheapest; a stored zero is no edge to
    # csgraph, so zeros are the smallest positive float (sums of them round to 0).
    pair = rows * (n + 1) + cols
    order = np.lexsort((data, pair))
    sel = order[np.r_[True, pair[order][1:] != pair[order][:-1]]]
    data = np.maximum(data[sel], np.finfo(np.float64).tiny)
    matrix = csr_matrix((data, (rows[sel], cols[sel])), shape=(n + 1, n + 1))
    dist = dijkstra(matrix, directed=True, indices=source)[:n]
    ok = np.isfinite(dist)
    out[ok] = np.rint(dist[ok]).astype(np.int64)
    return out


def replay_graph_of(trace: TraceData) -> DependencyGraph:
    """The graph a replay runs on: every step's (the trace's when it has no steps), so a
    step that ends sooner lets the next one start sooner."""
    return dependency_graph(trace, None, all_steps=True)


def what_if(
    trace: TraceData,
    remove: list[str] | tuple[str, ...] = (),
    scale: dict[str, float] | None = None,
    path: bool = True,
) -> WhatIf:
    """Replay ``trace`` with the slices ``remove`` selects removed and those ``scale``
    selects sped up by their factor (see :func:`resolve` for selectors). ``path``: also
    the moved timeline's critical path."""
    changes = [resolve(trace, s, 0.0) for s in remove]
    changes += [resolve(trace, s, float(f)) for s, f in (scale or {}).items()]
    return replay(trace, changes, path)


def replay(trace: TraceData, changes: list[Change], path: bool = True) -> WhatIf:
    """Replay with resolved ``changes`` (factors multiply where they overlap)."""
    graph = replay_graph_of(trace)
    factor = np.ones(len(trace.slices))
    for c in changes:
        factor[c.mask] *= c.factor
    ts, end = replay_graph(graph, factor)
    moved_path = _path(trace, graph, ts, end) if path else None
    return WhatIf(changes, _step_table(trace, graph, ts, end), ts, end, moved_path)


def _step_table(
    trace: TraceData, graph: DependencyGraph, ts: np.ndarray, end: np.ndarray
) -> pd.DataFrame:
    st = steps(trace)
    b0, b1 = attributed_windows(trace)
    a0, a1 = attributed_windows(trace, ts, end, _host_ranges(trace, graph, ts, end))
    return pd.DataFrame(
        {
            "step": st["step"].to_numpy(np.int64),
            "before_ns": (b1 - b0).astype(np.int64),
            "after_ns": (a1 - a0).astype(np.int64),
            "saving_ns": ((b1 - b0) - (a1 - a0)).astype(np.int64),
            "partial": st["partial"].to_numpy(bool),
        }
    )


def _host_ranges(
    trace: TraceData, graph: DependencyGraph, ts: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each step's host range after the replay: its annotation's new times; for a trace
    with no steps (one step, the whole trace), the recorded span moved as the graph's
    first start and last end moved (slices that are no node, like the profiler's own span,
    would otherwise hold it)."""
    st = steps(trace)
    sl = st["slice"].to_numpy(np.int64)
    if len(sl) and (sl >= 0).all():
        return ts[sl], end[sl]
    h0 = st["start_ns"].to_numpy(np.int64)
    h1 = st["end_ns"].to_numpy(np.int64)
    nodes = graph.nodes
    arrays = graph.arrays
    if arrays is None or len(nodes) == 0:
        return h0, h1
    first = int(ts[nodes].min()) - int(arrays.ts[nodes].min())
    last = int(arrays.end[nodes].max()) - int(end[nodes].max())
    return h0 + first, h1 - last


def _path(
    trace: TraceData, graph: DependencyGraph, ts: np.ndarray, end: np.ndarray
) -> CriticalPath:
    """The critical path of the moved timeline: the graph with its slices at their new
    times, each edge weighing the time between its points now (hand-offs that now run
    back in time left out)."""
    assert graph.arrays is not None
    arrays = dataclasses.replace(graph.arrays, ts=ts, end=end)
    e = graph.edges
    sp, dp = e["src_point"].to_numpy(), e["dst_point"].to_numpy()
    src, dst = e["src"].to_numpy(), e["dst"].to_numpy()
    weight = np.where(dp == 1, end[dst], ts[dst]) - np.where(sp == 1, end[src], ts[src])
    ok = weight >= 0
    moved = e.assign(weight=weight.astype(np.int64))[ok].reset_index(drop=True)
    nodes = graph.nodes
    window = (int(ts[nodes].min()), int(end[nodes].max())) if len(nodes) else graph.window
    g = dataclasses.replace(graph, edges=moved, arrays=arrays, window=window)
    result = path_through(trace, g)
    result.scope = scope_label(trace, None, all_steps=True)
    return result


# -- selectors ----------------------------------------------------------------------------

_STREAM = re.compile(r"stream\s*(-?\d+)", re.IGNORECASE)


def resolve(trace: TraceData, selector: str, factor: float) -> Change:
    """The slices a selector names: a finding kind (``input_stall``: what its fix removes,
    :func:`fix_mask`), ``stream N`` (the device work on stream N), else a slice name
    (exact). Reached too: what nests in them and the device work they launched. A selector
    that names nothing is a :class:`UsageError` saying what would."""
    from explorer.analysis.detectors import FINDING_KINDS

    if not 0 <= factor <= 1:
        raise UsageError(
            f"{selector}={factor:g}: a what-if takes speed-ups only, a factor from 0 (removed) to 1"
        )
    sel = selector.strip()
    stream = _STREAM.fullmatch(sel)
    if sel in FINDING_KINDS:
        mask = fix_mask(trace, sel)
        if not mask.any():
            raise UsageError(f"{sel}: the trace has no {sel.replace('_', ' ')} to remove")
        return Change(sel, factor, reach(trace, mask, sel not in FIX_KEEPS_DEVICE))
    elif stream is not None:
        on = trace.on_device() & (trace.slices["stream"].to_numpy(np.int64) == int(stream[1]))
        if not on.any():
            have = sorted(
                {
                    int(x)
                    for x in trace.slices["stream"].to_numpy(np.int64)[trace.on_device()]
                    if x >= 0
                }
            )
            raise UsageError(
                f"{sel}: no device work on that stream (streams: {', '.join(map(str, have)) or 'none'})"
            )
        mask = on
    else:
        names = trace.slices["name"]
        cats = names.cat.categories
        hit = cats.get_indexer([sel])[0] if sel in set(cats) else -1
        if hit < 0:
            close = difflib.get_close_matches(sel, [str(c) for c in cats], n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UsageError(
                f"{sel}: no slice has that name, and it is no finding kind "
                f"({', '.join(FINDING_KINDS)}) nor 'stream N'{hint}"
            )
        mask = names.cat.codes.to_numpy() == hit
    return Change(sel, factor, reach(trace, mask))


def reach(trace: TraceData, mask: np.ndarray, launched: bool = True) -> np.ndarray:
    """``mask``, everything nested under a slice in it, and (``launched``) the device work
    they launched."""
    out = trace.inherit_down(mask, keep=mask)
    if not launched:
        return out
    src = launcher(trace)
    dev = np.flatnonzero(src >= 0)
    out[dev] |= out[src[dev]]
    return out


def fix_mask(trace: TraceData, kind: str) -> np.ndarray:
    """The slices a fix of finding ``kind`` removes (see :data:`FIX_CLASSES`; other kinds:
    the launch calls of a launch-bound trace; the evidence of the trace's findings of that
    kind)."""
    if kind in FIX_CLASSES:
        out: np.ndarray = getattr(classes(trace), FIX_CLASSES[kind]).copy()
        return out
    if kind == "launch_bound":  # the launch calls (one graph launch stands for many)
        kinds = trace.slices["kind"]
        return launch_call_mask(trace.slices["name"].array) & np.asarray(kinds == "runtime")
    from explorer.analysis.findings import findings

    out = np.zeros(len(trace.slices), bool)
    for f in findings(trace):
        if f.kind == kind:
            out[np.asarray(f.evidence, np.int64)] = True
    return out


# -- findings -----------------------------------------------------------------------------


@memoised(
    "predicted_findings",
    depends_on=(
        "findings",
        "dependency_graph",
        "critical_path",
        "attributed_steps",
        "slice_classes",
    ),
)
def predicted_findings(trace: TraceData) -> list[Finding]:
    """The trace's findings, each with what its fix saves, ranked by it (what the report
    shows). Memoised, and stored beside a cached trace's tables, so a repeat report
    replays nothing; copies, so the kept findings are never changed under their users."""
    from explorer.analysis.findings import findings

    return predict_savings(trace, [dataclasses.replace(f) for f in findings(trace)])


def predict_savings(trace: TraceData, found: list[Finding]) -> list[Finding]:
    """Each finding with ``predicted_saving_ns`` (the step time its fix saves, summed over
    its steps) and, where that is well under its time lost, why; ranked by it (ties: by
    time lost, as before). One replay per finding kind.

    The replays need the graph, not the critical path, and the path not the replays: where
    the path is still to be found, the replays run in a forked child meanwhile
    (:mod:`explorer.analysis.ahead`), which inherits the graph built here."""
    if not found:
        return found
    from explorer.analysis.ahead import run_forked
    from explorer.analysis.critical_path import critical_path

    graph = replay_graph_of(trace)  # built here, before a fork: the child replays this graph
    gone = [_fix_of(trace, f) for f in found]
    tables: dict[bytes, pd.DataFrame] = {}
    if not trace.memo.available("critical_path", (None, True)):
        # What both the path and the replays read, computed once, before the fork: shared.
        graph.point_edges()
        graph.edge_owners()
        with run_forked(trace, lambda: replay_tables(trace, gone)) as ahead:
            critical_path(trace, None, all_steps=True)
            tables = ahead.result() or {}
    # The path first: its search's peak is not stacked on the replays' prepared arrays.
    path = critical_path(trace, None, all_steps=True).edges
    tables = replay_tables(trace, gone, tables)
    path_owner = path["owner"].to_numpy(np.int64) if len(path) else np.empty(0, np.int64)
    path_w = path["weight"].to_numpy(np.int64) if len(path) else np.empty(0, np.int64)
    on_path: dict[bytes, int] = {}
    for f, fix in zip(found, gone, strict=True):
        if fix is None:
            f.predicted_saving_ns = 0
            continue
        key, mask = fix
        if key not in on_path:
            mine = path_owner >= 0
            mine[mine] = mask[path_owner[mine]]
            on_path[key] = int(path_w[mine].sum())
        table = tables[key]
        per_step = table.set_index("step")["saving_ns"]
        on = [s for s in f.steps if s in per_step.index] or list(_counted(table)["step"])
        f.predicted_saving_ns = max(0, int(per_step.loc[on].sum()))
        f.predicted_note = _why_less(f, on_path[key])
    found.sort(key=lambda f: (-(f.predicted_saving_ns or 0), -f.time_lost_ns))
    return found


def _fix_of(trace: TraceData, f: Finding) -> tuple[bytes, np.ndarray] | None:
    """What a fix of ``f`` removes, keyed by the slices (fixes that remove the same slices
    share one replay); None for a finding no replay prices (memory, nothing lost)."""
    if f.kind == "memory" or f.time_lost_ns <= 0:
        return None
    n = len(trace.slices)
    mask = (
        fix_mask(trace, f.kind)
        if f.kind in FIX_CLASSES or f.kind == "launch_bound"
        else _evidence_mask(n, f)
    )
    if not mask.any():
        mask = _evidence_mask(n, f)
    gone = reach(trace, mask, f.kind not in FIX_KEEPS_DEVICE)
    return np.packbits(gone).tobytes(), gone


def replay_tables(
    trace: TraceData,
    fixes: list[tuple[bytes, np.ndarray] | None],
    have: dict[bytes, pd.DataFrame] | None = None,
) -> dict[bytes, pd.DataFrame]:
    """Per distinct fix (see :func:`_fix_of`), the step table of its replay (those in
    ``have`` kept as they are). A fix that removes no node of the graph moves nothing:
    with nothing changed the replay is the recorded timeline, so it replays none."""
    graph = replay_graph_of(trace)
    assert graph.arrays is not None
    out = dict(have or {})
    prepared: Prepared | None = None
    for fix in fixes:
        if fix is None or fix[0] in out:
            continue
        key, gone = fix
        if gone[graph.nodes].any():
            prepared = prepared or prepare(graph)
            ts, end = replay_graph(prepared, np.where(gone, 0.0, 1.0))
        else:
            ts, end = graph.arrays.ts, graph.arrays.end
        out[key] = _step_table(trace, graph, ts, end)
    return out


def _evidence_mask(n: int, f: Finding) -> np.ndarray:
    out = np.zeros(n, bool)
    out[np.asarray(f.evidence, np.int64)] = True
    return out


def _why_less(f: Finding, on_path: int) -> str:
    """Why a fix saves much less than the time the finding lost ("" when it does not):
    what it removes is mostly off the critical path (other work overlapped it), or it was
    on the path and another path takes over once it is gone (``on_path``: the critical
    path's time in what the fix removes)."""
    lost, saved = int(f.time_lost_ns), int(f.predicted_saving_ns or 0)
    if lost <= 0 or saved >= OVERLAP_NOTE_SHARE * lost:
        return ""
    head = f"its fix saves {fmt_ns(saved)} of the {fmt_ns(lost)} lost: "
    if on_path < OVERLAP_NOTE_SHARE * lost:
        return head + (
            f"only {fmt_ns(on_path)} of what it removes is on the critical path, the rest "
            "overlaps other work"
        )
    return head + "another path through the step takes over and sets its time"
