"""Which line of user code is responsible for each slice.

Host slices: the innermost *user* frame of the slice's own Python stack
(:func:`explorer.trace.source.user_frames`); a slice without one inherits its nearest
ancestor's on the same thread (an ``aten::mm`` under a ``python_function`` slice of
``train.py:42`` belongs to line 42).

Device slices (kernels, copies, collectives): the frame of the runtime call that launched
them — through ``launch`` flows, else by matching ``correlation`` ids with host runtime
calls. A kernel launched from an autograd backward thread thus gets the frame of the
launch, which (with the ancestor rule) is the forward op's line when the profiler
recorded it.

Work is vectorised over integer frame codes: one factorize of the frames, one pass per
nesting depth, one take through the flows.

This is the one answer to "which line of my code is this": the report, the Source panel,
the Details panel and ``Trace.user_frame`` all read it (:func:`user_line` for one slice).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.trace.columns import category_values
from explorer.trace.memo import memoised
from explorer.trace.model import TraceData

SOURCE_COLUMNS = ["file", "line", "function"]


@memoised("frame_codes", depends_on=("user_frames", "launcher"))
def frame_codes(trace: TraceData) -> tuple[np.ndarray, pd.DataFrame]:
    """(code per slice, frames table). ``frames.iloc[code]`` is the slice's user frame;
    code -1 means unknown. Cached on the trace."""
    n = len(trace.slices)
    code, frames = _own_frames(trace, n)
    if n:
        code = trace.inherit_down(code, keep=code >= 0)
        _through_launches(trace, code)
    return code, frames


def _own_frames(trace: TraceData, n: int) -> tuple[np.ndarray, pd.DataFrame]:
    from explorer.trace.source import user_frames

    uf = user_frames(trace)
    if n == 0 or len(uf) == 0:
        return np.full(n, -1, np.int64), pd.DataFrame({c: [] for c in SOURCE_COLUMNS})
    # The distinct (file, line, function) in order of first appearance, factorized on the
    # columns' integer codes: never a string per slice.
    files = uf["file"].array
    funcs = uf["function"].array
    file_names = np.append(np.asarray(files.categories.astype(str), dtype=object), "nan")
    func_names = np.append(np.asarray(funcs.categories.astype(str), dtype=object), "nan")
    fc = np.asarray(files.codes, np.int64) % len(file_names)  # -1 (missing) → "nan"
    gc = np.asarray(funcs.codes, np.int64) % len(func_names)
    line = uf["line"].to_numpy(np.int64)
    rows = np.flatnonzero(file_names[fc] != "")
    code = np.full(n, -1, np.int64)
    if len(rows):
        lines, line_rank = np.unique(line[rows], return_inverse=True)
        key = (fc[rows] * len(lines) + line_rank) * len(func_names) + gc[rows]
        codes, uniques = pd.factorize(key)
        code[rows] = codes
        first = np.full(len(uniques), len(rows), np.int64)
        np.minimum.at(first, codes, np.arange(len(rows)))
        at = rows[first]
        frames = pd.DataFrame(
            {"file": file_names[fc[at]], "line": line[at], "function": func_names[gc[at]]}
        )
    else:
        frames = pd.DataFrame({c: [] for c in SOURCE_COLUMNS})
    return code, frames


@memoised("launcher")
def launcher(trace: TraceData) -> np.ndarray:
    """Per slice, the id of the host runtime call that launched it (-1 when none).

    From ``launch`` flows first, then from ``correlation`` ids shared with a host slice of
    kind ``runtime``/``sync``. Cached on the trace.
    """
    s = trace.slices
    n = len(s)
    out = np.full(n, -1, np.int64)
    fl = trace.flows
    if len(fl):
        lf = fl[np.asarray(fl["type"] == "launch")]  # categorical: by code
        dst = lf["dst"].to_numpy(np.int64)
        src = lf["src"].to_numpy(np.int64)
        ok = (dst >= 0) & (dst < n) & (src >= 0) & (src < n)
        out[dst[ok]] = src[ok]
    corr = s["correlation"].to_numpy(np.int64)
    on_dev = trace.on_device()
    need = np.flatnonzero(on_dev & (out < 0) & (corr >= 0))
    if len(need):
        kind = category_values(s["kind"])
        host_rt = np.flatnonzero(trace.on_host() & (corr >= 0) & np.isin(kind, ["runtime", "sync"]))
        if len(host_rt):
            by_corr = pd.Series(host_rt, index=corr[host_rt])
            by_corr = by_corr[~by_corr.index.duplicated(keep="first")]
            found = by_corr.reindex(corr[need]).to_numpy()
            hit = ~pd.isna(found)
            out[need[hit]] = found[hit].astype(np.int64)
    return out


@memoised("before_capture", depends_on=("launcher",))
def launched_before_capture(trace: TraceData) -> np.ndarray:
    """Per slice: is it device work launched before the capture started?

    A capture that starts mid-iteration holds the tail of the iteration then running: device
    ops (kernels, copies, memsets, collectives) whose launch is not in the trace (no
    ``launch`` flow, no host runtime call with their ``correlation``) and whose correlation
    id is below every runtime call's (ids grow with each launch, so they were issued before
    the first call the profiler saw). They belong to no profiled step: the first step
    starts where they end (:func:`explorer.analysis.steps.attributed_steps`) and the
    breakdown leaves them out. Device work merely missing its launch (a trace with events
    filtered out, a launch from an untraced thread) is not this: its id is in the capture's
    range. A trace without runtime calls marks nothing. Cached on the trace.
    """
    s = trace.slices
    n = len(s)
    out = np.zeros(n, bool)
    if n == 0:
        return out
    corr = s["correlation"].to_numpy(np.int64)
    kind = category_values(s["kind"])
    host_rt = trace.on_host() & (corr >= 0) & np.isin(kind, ["runtime", "sync"])
    if not host_rt.any():
        return out
    first = int(corr[host_rt].min())
    work = trace.on_device() & (kind != "device_annotation")
    out[work & (launcher(trace) < 0) & (corr >= 0) & (corr < first)] = True
    return out


def _through_launches(trace: TraceData, code: np.ndarray) -> None:
    src = launcher(trace)
    rows = np.flatnonzero((src >= 0) & (code < 0))
    if len(rows):
        code[rows] = code[src[rows]]


@memoised("slice_sources", depends_on=("frame_codes",))
def slice_sources(trace: TraceData) -> pd.DataFrame:
    """``DataFrame(file, line, function)`` with one row per slice id ("" / -1 when unknown).

    ``file`` and ``function`` are categoricals over the trace's distinct user lines, not a
    string per slice: the viewer holds this table while it is open, and a million slices'
    strings (object arrays, then pandas' copy of them) took ~250 MB where the codes take 8.
    """
    code, frames = frame_codes(trace)
    line = np.full(len(code), -1, np.int64)
    known = code >= 0
    line[known] = frames["line"].to_numpy(np.int64)[code[known]]
    return pd.DataFrame(
        {
            "file": _per_slice(frames["file"], code),
            "line": line,
            "function": _per_slice(frames["function"], code),
        }
    )


def _per_slice(values: pd.Series, code: np.ndarray) -> pd.Categorical:
    """``values[code]`` per slice ("" where ``code`` is -1), as a categorical."""
    lines = pd.Categorical(np.concatenate([np.array([""], object), values.to_numpy(object)]))
    return pd.Categorical.from_codes(lines.codes[code + 1], dtype=lines.dtype)


def user_line(trace: TraceData, slice_id: int) -> tuple[str, int, str] | None:
    """The user line responsible for one slice — the same answer as :func:`slice_sources`
    (device work through its launch), for the Details panel and ``Trace.user_frame``."""
    code, frames = frame_codes(trace)
    c = int(code[int(slice_id)])
    if c < 0:
        return None
    return (str(frames["file"].iat[c]), int(frames["line"].iat[c]), str(frames["function"].iat[c]))


def top_lines(
    trace: TraceData, ids: np.ndarray, weights: np.ndarray | None = None, top: int = 5
) -> list[tuple[str, int, str]]:
    """The ``top`` user lines of the slices ``ids``, heaviest first (by ``weights``, else count)."""
    ids = np.asarray(ids, np.int64)
    if len(ids) == 0:
        return []
    code, frames = frame_codes(trace)
    c = code[ids]
    w = np.ones(len(ids)) if weights is None else np.asarray(weights, float)
    return heaviest_lines(c, w, frames, top)


def heaviest_lines(
    code: np.ndarray, weights: np.ndarray, lines: pd.DataFrame, top: int
) -> list[tuple[str, int, str]]:
    """The ``top`` rows of ``lines`` (``file, line, function``) with the most weight, where
    ``code[i]`` is the row of item ``i`` (-1: none) and ``weights[i]`` its weight; ties keep
    the rows' order, rows with no weight are left out."""
    ok = (code >= 0) & (weights > 0)
    if not ok.any():
        return []
    tot = np.bincount(code[ok], weights=weights[ok], minlength=len(lines))
    order = np.argsort(-tot, kind="stable")
    order = order[tot[order] > 0][:top]
    return [
        (str(lines["file"].iat[i]), int(lines["line"].iat[i]), str(lines["function"].iat[i]))
        for i in order
    ]
