"""Export a trace as Chrome trace JSON (``.json``, or ``.json.gz``): for tools that only
read JSON (chrome://tracing, older viewers, scripts), and readable back by
``explorer.load``.

It carries the same content as the Perfetto export: every slice (``ph: X``) with its args
exactly as the source file had them, flows (``s``/``f`` pairs), counters (``C``), the
allocator's ``[memory]`` events, instants, process/thread names and order (``M``), and
Explorer's findings and critical path as slices of an ``Explorer`` process. Slices keep
their own pid/tid (overlapping slices stay on their track: JSON viewers stack them as best
they can, and a re-load sees the trace as it was).

Timestamps are microseconds with three decimals from the trace's start, and
``baseTimeNanoseconds`` holds that start (as Kineto writes it): epoch microseconds do not fit
a double to the nanosecond, offsets from the start do, so a re-load gets every time back
exactly.

Lines are built per column — JSON for each distinct name, category and pid/tid encoded
once, numbers formatted as arrays, raw args bytes spliced in without decoding — and
written in chunks, so memory holds one chunk's text at a time.
"""

from __future__ import annotations

import gzip
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from explorer.export.results import CRITICAL_PATH_ROW, Results, explorer_results
from explorer.readers.json_trace import EXPORT_MARKER
from explorer.trace.args_store import binary_parts
from explorer.trace.model import TraceData

CHUNK = 1 << 16
_ENC = msgspec.json.Encoder()
_FRAC = np.array([f".{i:03d}".encode() for i in range(1000)], object)
#: Metadata keys the reader adds; everything else came from the file and goes back.
_READER_KEYS = frozenset(
    {
        "start_ns",
        "end_ns",
        "source",
        "format",
        "rank",
        "world_size",
        "has_call_stack_args",
        "warnings",
        "event_counts",
        "synthetic",
    }
)
_FLOW_CAT = {"launch": b"ac2g", "fwdbwd": b"fwdbwd"}
EXPLORER_PID = "Explorer"


@dataclass
class ChromeExport:
    """What was written, for the CLI's summary line and for tests."""

    path: Path
    slices: int = 0
    flows: int = 0
    counter_samples: int = 0
    memory_events: int = 0
    instants: int = 0
    result_slices: int = 0
    bytes: int = 0
    notes: list[str] = field(default_factory=list)


def to_chrome(
    trace: TraceData, path: str | Path, *, results: Results | None = None
) -> ChromeExport:
    """Write ``trace`` to ``path`` as Chrome trace JSON (gzip when it ends in ``.gz``)."""
    path = Path(path)
    if results is None:
        results = explorer_results(trace)
    summary = ChromeExport(path=path)
    # Times are written relative to the trace's start, which goes to baseTimeNanoseconds:
    # epoch microseconds do not fit a double to the nanosecond, small offsets do.
    origin = 0
    where = _track_json(trace.tracks)
    if path.name.lower().endswith(".gz"):
        # zlib's default level: gzip's 9 is several times slower for a few % smaller
        stream: io.BufferedIOBase = gzip.GzipFile(path, "wb", compresslevel=6)
    else:
        stream = open(path, "wb")  # closed by the with below
    with stream as f:
        f.write(EXPORT_MARKER + b'"traceEvents":[\n')  # first: directory discovery skips it
        writer = _Lines(f)
        writer.add(_metadata_lines(trace.tracks, bool(results.count)))
        for lines in _slice_lines(trace, origin, where):
            writer.add(lines)
        flows = _flow_lines(trace, origin, where, results)
        writer.add(flows)
        writer.add(_counter_lines(trace, origin))
        writer.add(_memory_lines(trace, origin, where))
        writer.add(_instant_lines(trace, origin, where))
        writer.add(_result_lines(results, origin))
        # evidence flow ids above every id the flows above could have used
        first_id = 2 + max(int(trace.flows["flow_id"].max()) if len(trace.flows) else 0, 0)
        first_id += len(trace.flows) + len(results.flows)
        writer.add(_evidence_lines(trace, results, origin, where, first_id))
        writer.add(_path_lines(results, origin))
        meta = {k: v for k, v in trace.metadata.items() if k not in _READER_KEYS}
        meta.pop("exportedBy", None)  # written first, above
        meta["baseTimeNanoseconds"] = int(trace.metadata.get("start_ns", 0) or 0)
        if trace.synthetic:
            meta["synthetic"] = True  # synthetic data stays labelled synthetic
        f.write(b"\n]," + _ENC.encode(_plain(meta))[1:])
    summary.slices = len(trace.slices)
    summary.flows = len(flows) // 2
    summary.counter_samples = len(trace.counters)
    summary.memory_events = len(trace.memory)
    summary.instants = len(trace.instants)
    summary.result_slices = results.count
    summary.bytes = path.stat().st_size
    return summary


class _Lines:
    """Writes event lines separated by commas, chunk by chunk."""

    def __init__(self, f: io.BufferedIOBase) -> None:
        self.f = f
        self.first = True

    def add(self, lines: np.ndarray | list[bytes]) -> None:
        if len(lines) == 0:
            return
        if not self.first:
            self.f.write(b",\n")
        self.f.write(b",\n".join(lines))
        self.first = False


def _plain(v: Any) -> Any:
    """Metadata values as JSON-able Python (numpy scalars and arrays become plain)."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v


def _json_id(text: str) -> bytes:
    """A pid/tid as JSON: a number when the file had a number, else a string."""
    try:
        return str(int(text)).encode() if str(int(text)) == text else _ENC.encode(text)
    except ValueError:
        return _ENC.encode(text)


def _track_json(tracks: pd.DataFrame) -> np.ndarray:
    """``,"pid":…,"tid":…`` of every track (object array of bytes), by track id."""
    out = np.empty(len(tracks) + 1, object)
    for row in tracks.itertuples(index=False):
        out[int(row.id)] = b',"pid":' + _json_id(str(row.pid)) + b',"tid":' + _json_id(str(row.tid))
    out[len(tracks)] = b""  # track -1 (global): no pid/tid
    return out


def _category_json(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """JSON string of each category (last entry: ""), and each row's code into it."""
    cat = col if col.dtype.name == "category" else col.astype("category")
    table = np.array([_ENC.encode(str(c)) for c in cat.cat.categories] + [b'""'], object)
    return table, cat.cat.codes.to_numpy()


def _us(ns: np.ndarray) -> np.ndarray:
    """Nanoseconds as microsecond JSON numbers with exactly three decimals (bytes)."""
    ns = np.asarray(ns, np.int64)
    mag = np.abs(ns)
    whole = (mag // 1000).astype("S20").astype(object)
    text = whole + _FRAC[mag % 1000]
    if (ns < 0).any():
        text = np.where(ns < 0, b"-" + text, text)
    return text


def _slice_lines(trace: TraceData, origin: int, where: np.ndarray):
    """``ph: X`` lines for every slice, in chunks of :data:`CHUNK` (object arrays)."""
    sl = trace.slices
    n = len(sl)
    if n == 0:
        return
    names, name_code = _category_json(sl["name"])
    cats, cat_code = _category_json(sl["cat"])
    ts = sl["ts"].to_numpy(np.int64) + origin
    dur = sl["dur"].to_numpy(np.int64)
    track = sl["track"].to_numpy(np.int64)
    store = trace.args_store
    has_args = store is not None and len(store) == n
    for lo in range(0, n, CHUNK):
        hi = min(lo + CHUNK, n)
        line = (
            b'{"ph":"X","cat":'
            + cats[cat_code[lo:hi]]
            + b',"name":'
            + names[name_code[lo:hi]]
            + where[track[lo:hi]]
            + b',"ts":'
            + _us(ts[lo:hi])
            + b',"dur":'
            + _us(dur[lo:hi])
        )
        if has_args:
            data, offsets = binary_parts(store.slice_rows(lo, hi))
            raw = np.empty(hi - lo, object)
            raw[:] = list(
                map(
                    bytes,
                    map(data.__getitem__, map(slice, offsets[:-1].tolist(), offsets[1:].tolist())),
                )
            )
            has = np.diff(offsets) > 2  # more than "{}"
            line = np.where(has, line + b',"args":' + raw + b"}", line + b"}")
        else:
            line = line + b"}"
        yield line


def _flow_lines(trace: TraceData, origin: int, where: np.ndarray, results: Results) -> np.ndarray:
    """``s``/``f`` pairs for every flow: at the source slice's start and, bound to the
    enclosing slice (``bp: e``), at the destination slice's start."""
    sl = trace.slices
    n = len(sl)
    parts = []
    if trace.flows is not None and len(trace.flows):
        parts.append(trace.flows[["src", "dst", "type", "flow_id"]].astype({"type": str}))
    if len(results.flows):
        extra = results.flows[["src", "dst", "type"]].astype({"type": str})
        extra["flow_id"] = -1
        parts.append(extra)
    if not parts or n == 0:
        return np.zeros(0, object)
    fl = pd.concat(parts, ignore_index=True)
    src, dst = fl["src"].to_numpy(np.int64), fl["dst"].to_numpy(np.int64)
    ok = (src >= 0) & (dst >= 0) & (src < n) & (dst < n) & (src != dst)
    # the trace's own flows first, then an analysis' flow only where no arrow exists yet
    ok &= ~pd.DataFrame({"s": src, "d": dst}).duplicated().to_numpy()
    fl, src, dst = fl[ok], src[ok], dst[ok]
    fid = fl["flow_id"].to_numpy(np.int64)
    # Flows the reader derived from correlation ids have no id in the file: give them
    # fresh ids above every id the file used.
    fresh = fid < 0
    fid = fid.copy()
    fid[fresh] = int(fid.max(initial=0)) + 1 + np.arange(int(fresh.sum()))
    ts = sl["ts"].to_numpy(np.int64) + origin
    track = sl["track"].to_numpy(np.int64)
    cat = fl["type"].map(lambda k: _FLOW_CAT.get(k, b"explorer_" + k.encode())).to_numpy(object)
    head = b',"id":' + fid.astype("S20").astype(object) + b',"cat":"' + cat + b'","name":"' + cat
    out = np.empty(2 * len(fid), object)
    out[0::2] = b'{"ph":"s"' + head + b'"' + where[track[src]] + b',"ts":' + _us(ts[src]) + b"}"
    out[1::2] = (
        b'{"ph":"f"' + head + b'"' + where[track[dst]] + b',"ts":' + _us(ts[dst]) + b',"bp":"e"}'
    )
    return out


def _counter_lines(trace: TraceData, origin: int) -> np.ndarray:
    c = trace.counters
    if c is None or len(c) == 0:
        return np.zeros(0, object)
    tracks = trace.tracks
    label = np.array([_ENC.encode(str(x)) for x in tracks["thread"]], object)
    pid = np.array([_json_id(str(x)) for x in tracks["pid"]], object)
    t = c["track"].to_numpy(np.int64)
    values = np.array([_ENC.encode(float(v)) for v in np.unique(c["value"].to_numpy())], object)
    v_code = np.searchsorted(np.unique(c["value"].to_numpy()), c["value"].to_numpy())
    return (
        b'{"ph":"C","name":'
        + label[t]
        + b',"pid":'
        + pid[t]
        + b',"ts":'
        + _us(c["ts"].to_numpy(np.int64) + origin)
        + b',"args":{'
        + label[t]
        + b":"
        + values[v_code]
        + b"}}"
    )


def _placed(track: pd.Series, where: np.ndarray) -> np.ndarray:
    """The ``"pid":..,"tid":..`` text of each row's track (the last entry: no track)."""
    t = track.to_numpy(np.int64)
    return where[np.where(t >= 0, t, len(where) - 1)]


def _memory_lines(trace: TraceData, origin: int, where: np.ndarray) -> np.ndarray:
    """The allocator's events as Kineto writes them (``[memory]`` instants)."""
    m = trace.memory
    if m is None or len(m) == 0:
        return np.zeros(0, object)

    def num(col: str) -> np.ndarray:
        return m[col].to_numpy(np.int64).astype("S20").astype(object)

    return (
        b'{"ph":"i","cat":"cpu_instant_event","s":"t","name":"[memory]"'
        + _placed(m["track"], where)
        + b',"ts":'
        + _us(m["ts"].to_numpy(np.int64) + origin)
        + b',"args":{"Device Type":'
        + num("device_type")
        + b',"Device Id":'
        + num("device")
        + b',"Addr":'
        + num("addr")
        + b',"Bytes":'
        + num("bytes")
        + b',"Total Allocated":'
        + num("total_allocated")
        + b',"Total Reserved":'
        + num("total_reserved")
        + b"}}"
    )


def _instant_lines(trace: TraceData, origin: int, where: np.ndarray) -> np.ndarray:
    i = trace.instants
    if i is None or len(i) == 0:
        return np.zeros(0, object)
    names, name_code = _category_json(i["name"])
    cats, cat_code = _category_json(i["cat"])
    scopes, scope_code = _category_json(i["scope"].astype(str).replace("", "t"))
    return (
        b'{"ph":"i","cat":'
        + cats[cat_code]
        + b',"name":'
        + names[name_code]
        + _placed(i["track"], where)
        + b',"ts":'
        + _us(i["ts"].to_numpy(np.int64) + origin)
        + b',"s":'
        + scopes[scope_code]
        + b"}"
    )


def _result_lines(results: Results, origin: int) -> list[bytes]:
    """Explorer's findings and critical path as slices of the ``Explorer`` process."""
    out = []
    for s in results.slices:
        event = {
            "ph": "X",
            "cat": "explorer",
            "name": s.name,
            "pid": EXPLORER_PID,
            "tid": s.row,
            "ts": 0,
            "dur": 0,
            "args": _plain(s.args),
        }
        text = _ENC.encode(event)
        ts = _us(np.array([s.ts + origin]))[0]
        dur = _us(np.array([s.dur]))[0]
        out.append(text.replace(b'"ts":0,"dur":0', b'"ts":' + ts + b',"dur":' + dur, 1))
    return out


def _evidence_lines(
    trace: TraceData, results: Results, origin: int, where: np.ndarray, first_id: int
) -> list[bytes]:
    """Flows from each finding to its evidence slices (those starting after it does)."""
    sl = trace.slices
    n = len(sl)
    ts = sl["ts"].to_numpy(np.int64)
    track = sl["track"].to_numpy(np.int64)
    out: list[bytes] = []
    next_id = first_id
    for s in results.slices:
        for e in dict.fromkeys(s.links):
            if not (0 <= e < n and ts[e] > s.ts):
                continue
            head = (
                b',"id":' + str(next_id).encode() + b',"cat":"explorer_evidence","name":"evidence"'
            )
            out.append(
                b'{"ph":"s"'
                + head
                + b',"pid":"'
                + EXPLORER_PID.encode()
                + b'","tid":'
                + _ENC.encode(s.row)
                + b',"ts":'
                + _us(np.array([s.ts + origin]))[0]
                + b"}"
            )
            out.append(
                b'{"ph":"f"'
                + head
                + where[track[e]]
                + b',"ts":'
                + _us(np.array([ts[e] + origin]))[0]
                + b',"bp":"e"}'
            )
            next_id += 1
    return out


def _path_lines(results: Results, origin: int) -> np.ndarray:
    """The critical path's runs on the Explorer process's "Critical path" row, with the
    track each is on, the slices it passes through and its top ops."""
    runs = results.path
    if len(runs) == 0:
        return np.zeros(0, object)

    def text(column: str) -> np.ndarray:
        return np.array([_ENC.encode(str(x)) for x in runs[column]], object)

    return (
        b'{"ph":"X","cat":"explorer","name":'
        + text("name")
        + b',"pid":"'
        + EXPLORER_PID.encode()
        + b'","tid":"'
        + CRITICAL_PATH_ROW.encode()
        + b'"'
        + b',"ts":'
        + _us(runs["ts"].to_numpy(np.int64) + origin)
        + b',"dur":'
        + _us(runs["dur"].to_numpy(np.int64))
        + b',"args":{"on":'
        + text("on")
        + b',"slices":'
        + runs["slices"].to_numpy(np.int64).astype("S20").astype(object)
        + b',"top ops":'
        + text("ops")
        + b"}}"
    )


def _metadata_lines(tracks: pd.DataFrame, with_results: bool) -> list[bytes]:
    """Process/thread names and display order (``ph: M``), as the reader expects them."""
    out = []
    seen: set[str] = set()
    for row in tracks.sort_values("order").itertuples(index=False):
        if row.type == "counter":
            continue
        pid, tid = _json_id(str(row.pid)), _json_id(str(row.tid))
        if str(row.pid) not in seen:
            seen.add(str(row.pid))
            name = str(row.process)
            suffix = f" ({row.pid})"
            if row.type == "host_thread" and name.endswith(suffix):
                name = name[: -len(suffix)]
            if name == f"process {row.pid}" or name == "process":
                name = ""  # the reader's default: the file had no name for it
            if name:
                out.append(
                    b'{"ph":"M","name":"process_name","pid":'
                    + pid
                    + b',"tid":0,"args":{"name":'
                    + _ENC.encode(name)
                    + b"}}"
                )
            out.append(
                b'{"ph":"M","name":"process_sort_index","pid":'
                + pid
                + b',"tid":0,"args":{"sort_index":'
                + str(int(row.order)).encode()
                + b"}}"
            )
        out.append(
            b'{"ph":"M","name":"thread_name","pid":'
            + pid
            + b',"tid":'
            + tid
            + b',"args":{"name":'
            + _ENC.encode(str(row.thread))
            + b"}}"
        )
        out.append(
            b'{"ph":"M","name":"thread_sort_index","pid":'
            + pid
            + b',"tid":'
            + tid
            + b',"args":{"sort_index":'
            + str(int(row.order)).encode()
            + b"}}"
        )
    if with_results:
        out.append(
            b'{"ph":"M","name":"process_name","pid":"'
            + EXPLORER_PID.encode()
            + b'","tid":0,"args":{"name":"Explorer"}}'
        )
    return out
