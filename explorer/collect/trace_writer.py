"""Merging Explorer's events into the profiler's Chrome trace, and writing it safely.

The profiler exports one Chrome trace per recorded cycle (one when there is no schedule).
We merge them into one document on the first cycle's time base, add Explorer's events on the
same clock (absolute realtime ns → µs since ``baseTimeNanoseconds``), keep only those that
fall inside a recorded window, add the top-level ``"explorer"`` block, and write gzip JSON
through :func:`explorer.safe_write.atomic_write` — a temporary file *linked* to its final
name, so a trace is never overwritten, even by a concurrent writer.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from explorer.collect.fallback_ops import fallback_events
from explorer.errors import OutputExists
from explorer.safe_write import atomic_write
from explorer.trace.decode import repair_unescaped_strings

SUFFIX = ".pt.trace.json.gz"


def default_stem(rank: int) -> str:
    """``<host>_rank<R>_<YYYYmmdd-HHMMSS>``: sortable, and distinct across ranks."""
    host = socket.gethostname().split(".")[0] or "host"
    return f"{host}_rank{rank}_{time.strftime('%Y%m%d-%H%M%S')}"


def read_chrome_trace(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    try:
        doc = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        doc = msgspec.json.decode(repair_unescaped_strings(raw))
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    return doc


def _windows(events: list[dict[str, Any]]) -> tuple[float, float]:
    """First start and last end (µs) of the profiler's own events."""
    ts = np.array([e.get("ts", np.nan) for e in events if e.get("ph") == "X"], dtype=float)
    dur = np.array([e.get("dur", 0.0) for e in events if e.get("ph") == "X"], dtype=float)
    if ts.size == 0:
        return (np.inf, -np.inf)
    return float(np.nanmin(ts)), float(np.nanmax(ts + dur))


def merge(
    cycles: list[dict[str, Any]], extra: list[dict[str, Any]], explorer_meta: dict[str, Any]
) -> dict[str, Any]:
    """One Kineto document from the profiler's cycles plus Explorer's events.

    ``extra`` holds events with ``ts_ns``/``dur_ns`` in absolute ns (see ``EventBuffer``).
    Events outside every recorded window (steps the schedule skipped) are dropped: the
    profiler has nothing to put next to them.
    """
    if not cycles:
        cycles = [{"traceEvents": []}]
    doc = dict(cycles[0])
    base_ns = int(doc.get("baseTimeNanoseconds", 0) or 0)
    events: list[dict[str, Any]] = list(doc.get("traceEvents", []))
    windows = [_windows(events)]
    for other in cycles[1:]:
        shift_us = (int(other.get("baseTimeNanoseconds", 0) or 0) - base_ns) / 1000.0
        evs = other.get("traceEvents", [])
        if shift_us:
            for e in evs:  # one loop per extra cycle over its events, only with a schedule
                if "ts" in e:
                    e["ts"] = e["ts"] + shift_us
        windows.append(_windows(evs))
        events.extend(evs)
    if len(extra):
        ts_us = (np.fromiter((e["ts_ns"] for e in extra), np.int64, len(extra)) - base_ns) / 1000.0
        keep = np.zeros(len(extra), bool)
        for lo, hi in windows:
            keep |= (ts_us >= lo) & (ts_us <= hi)
        for i in np.flatnonzero(keep):
            e = dict(extra[i])
            e["ts"] = round(float(ts_us[i]), 3)
            del e["ts_ns"]
            if "dur_ns" in e:
                e["dur"] = round(e.pop("dur_ns") / 1000.0, 3)
            events.append(e)
        explorer_meta = {
            **explorer_meta,
            "events_recorded": int(len(extra)),
            "events_kept": int(keep.sum()),
        }
    found = fallback_events(events)
    events.extend(found)
    explorer_meta = {**explorer_meta, "fallbacks_from_profiler": len(found)}
    doc["traceEvents"] = events
    doc["explorer"] = explorer_meta
    doc.setdefault("displayTimeUnit", "ms")
    return doc


def unique_path(out_dir: Path, stem: str) -> Path:
    """``out_dir/stem.pt.trace.json.gz``, or with ``_1``, ``_2``... when that exists."""
    path = out_dir / f"{stem}{SUFFIX}"
    n = 0
    while os.path.lexists(path):  # a dangling symlink holds its name too
        n += 1
        path = out_dir / f"{stem}_{n}{SUFFIX}"
    return path


def encode_trace(doc: dict[str, Any]) -> bytes:
    """The document as compact JSON, except that ``distributedInfo`` comes first, on a line
    of its own, written with a space after each colon (``"rank": 3``).

    Holistic Trace Analysis tells the ranks of a job apart by searching the file, line by
    line, for the first text matching ``"rank":\\s+N``: a compact ``"rank":3`` matches
    nothing, and every file of a 4-rank job then loads as rank 0 (each replacing the last).
    Only that small object is spaced; the events stay compact."""
    info = doc.get("distributedInfo")
    if not isinstance(info, dict):
        return msgspec.json.encode(doc, enc_hook=str)
    rest = {k: v for k, v in doc.items() if k != "distributedInfo"}
    head = json.dumps(info, default=str, separators=(", ", ": "))
    if not rest:
        return b'{"distributedInfo": ' + head.encode() + b"}"
    body = msgspec.json.encode(rest, enc_hook=str)  # b'{...}': its first byte is the brace
    return b'{"distributedInfo": ' + head.encode() + b",\n" + body[1:]


def write_atomic(doc: dict[str, Any], out_dir: Path, stem: str) -> Path:
    """Write gzip JSON under a name no other file has, through the one safe-write path
    (temporary file, fsync, link): a trace is never overwritten, even by a concurrent
    writer, and a writer killed midway leaves only a hidden temporary file that trace
    discovery ignores."""
    data = encode_trace(doc)

    def write(tmp: Path) -> None:
        with gzip.open(tmp, "wb", compresslevel=3) as fh:
            fh.write(data)

    while True:
        try:
            return atomic_write(unique_path(out_dir, stem), write)
        except OutputExists:  # another writer took the name meanwhile: take the next one
            continue


def check_writable(out_dir: Path) -> None:
    """Create ``out_dir`` and prove a file can be written there — before hours of training."""
    from explorer.errors import ExplorerError

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExplorerError(
            f"explorer.collect: cannot create output directory {out_dir}: {exc.strerror or exc} — "
            "choose a directory you can write to"
        ) from None
    probe = out_dir / f".explorer-write-test-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ExplorerError(
            f"explorer.collect: cannot write to {out_dir}: {exc.strerror or exc} — "
            "choose a directory you can write to"
        ) from None
