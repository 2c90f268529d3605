"""Chunks are decoded on their own and merged by concatenation: however the event array is
cut, the tables (same rows, same ids, same vocabularies, same args) are those of one pass.

Checked on every sample trace and every real trace in ../shared/traces, by loading each
with chunks of very different sizes (1 event, 7 events, the default) and comparing every
table, the metadata and the raw args."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import zstandard

import explorer
from explorer.errors import TraceError
from explorer.trace import chunked_read
from explorer.trace.build import build, build_tables
from explorer.trace.decode import Decoded, EventChunks, decode, read_bytes
from explorer.trace.model import TraceData
from tests.conftest import SAMPLE_TRACES, shared_trace_files

TABLES = ("slices", "tracks", "flows", "counters", "instants", "memory")
SAMPLES = sorted(p for p in SAMPLE_TRACES.rglob("*.json*"))
REAL = SAMPLES + shared_trace_files()


def assert_same_trace(a: TraceData, b: TraceData) -> None:
    """Every table equal (values, dtypes, categories, index), the same metadata and the
    same raw args for every slice."""
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)
    assert a.metadata == b.metadata
    blob_a, off_a, idx_a = a.args_store.arrays()
    blob_b, off_b, idx_b = b.args_store.arrays()
    assert bytes(blob_a) == bytes(blob_b)
    assert off_a.tolist() == off_b.tolist() and idx_a.tolist() == idx_b.tolist()


def _load_with_chunk_size(path: Path, size: int) -> TraceData:
    data, warnings = read_bytes(path)
    decoded = decode(path, data)
    events = b"[" + b",".join(bytes(text)[1:-1] for _, text in decoded.chunks) + b"]"
    rechunked = Decoded(EventChunks.of(events, size), decoded.metadata, warnings + decoded.warnings)
    return build(rechunked, path)


@pytest.mark.slow
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name[:40])
def test_any_chunking_gives_the_same_tables(path: Path) -> None:
    one_pass = _load_with_chunk_size(path, 1_000_000_000)
    assert len(one_pass.slices) > 0
    for size in (1, 7):
        assert_same_trace(_load_with_chunk_size(path, size), one_pass)


def test_ids_that_are_not_numbers_keep_one_code_across_chunks() -> None:
    """A text flow id seen in two chunks links the same events as in one pass; text pids
    and names first seen in a later chunk get the next codes."""

    def flow(ph: str, fid: str, pid: object, tid: int, ts: int) -> dict[str, object]:
        return {
            "ph": ph,
            "id": fid,
            "cat": "c",
            "name": "f",
            "pid": pid,
            "tid": tid,
            "ts": ts,
            "bp": "e",
        }

    events = [
        {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 5},
        flow("s", "first", 1, 1, 0),
        {"ph": "X", "name": "b", "pid": "host", "tid": 2, "ts": 10, "dur": 5},
        {"ph": "X", "name": "c", "pid": 1, "tid": 1, "ts": 20, "dur": 5},
        flow("s", "second", 1, 1, 20),
        {"ph": "X", "name": "d", "pid": "host", "tid": 2, "ts": 30, "dur": 5},
        flow("f", "second", "host", 2, 30),
        flow("f", "first", "host", 2, 10),
    ]
    import msgspec

    text = msgspec.json.encode(events)
    traces = [build(Decoded(EventChunks.of(text, size), {}), "<memory>") for size in (1, 2, 100)]
    for t in traces[:2]:
        assert_same_trace(t, traces[2])
    names = traces[0].slices["name"].astype(str).tolist()
    links = {(names[a], names[b], fid) for a, b, _, fid in traces[0].flows.itertuples(index=False)}
    assert {(a, b) for a, b, _ in links} == {("a", "b"), ("c", "d")}
    assert len({fid for *_, fid in links}) == 2 and all(fid < -1 for *_, fid in links)


# -- byte-range chunks, in this process and in worker processes ---------------------------


def _careful(path: Path) -> TraceData:
    """The careful reader: the whole text, split by a full decode of the event array."""
    data, warnings = read_bytes(path)
    decoded = decode(path, data)
    decoded.warnings[:0] = warnings
    return build(decoded, path)


def _chunked(
    path: Path, chunk_bytes: int, workers: int, monkeypatch: pytest.MonkeyPatch
) -> TraceData:
    monkeypatch.setattr(chunked_read, "CHUNK_BYTES", chunk_bytes)
    monkeypatch.setenv("EXPLORER_LOAD_WORKERS", str(workers))
    read = chunked_read.read_chunked(path)  # raises NeedsCareful if it cannot take the file
    return build_tables(read.events, read.metadata, read.warnings, path)


@pytest.mark.slow
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name[:40])
def test_byte_range_chunks_give_the_careful_readers_tables(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    careful = _careful(path)
    # chunks of ~1 event and of ~100 events, in this process and in two workers
    assert_same_trace(_chunked(path, 64, 1, monkeypatch), careful)
    assert_same_trace(_chunked(path, 20_000, 2, monkeypatch), careful)
    assert_same_trace(explorer.load(path, use_cache=False), careful)


def _variants(tmp: Path) -> dict[str, Path]:
    """One real trace written the ways traces come, and damaged where chunks are cut."""
    src = SAMPLE_TRACES / "cpu_cnn.pt.trace.json.gz"
    text = gzip.decompress(src.read_bytes())
    doc = json.loads(text)
    events = doc["traceEvents"]
    out: dict[str, bytes] = {
        "pretty.json": json.dumps(doc, indent=2).encode(),
        "bom.json": b"\xef\xbb\xbf" + text,
        "bare_array.json": json.dumps(events).encode(),
        "two_members.json.gz": gzip.compress(text[: len(text) // 2])
        + gzip.compress(text[len(text) // 2 :]),
        "padded.json.gz": gzip.compress(text) + b"\0" * 100,
        "frames.json.zst": zstandard.ZstdCompressor().compress(text[:5000])
        + zstandard.ZstdCompressor().compress(text[5000:]),
        "cut_gzip.json.gz": gzip.compress(text)[: len(gzip.compress(text)) * 2 // 3],
        "cut_text.json": text[: len(text) * 2 // 3],
        "metadata_after.json": json.dumps(
            {"traceEvents": events, "traceName": "x", "distributedInfo": {"rank": 3}}
        ).encode(),
        "second_traceEvents.json": text.rstrip()[:-1]
        + b', "traceEvents": '
        + json.dumps(events[:50]).encode()
        + b"}",
        "trailing_garbage.json": text + b"}",
    }
    # Boundaries the quick split would take: "},{" inside a string and inside args.
    tricky = [dict(e) for e in events]
    for k, e in enumerate(tricky):
        if e.get("ph") == "X" and k % 3 == 0:
            e["name"] = str(e.get("name")) + ' },{ "ph": "X" '
            e["args"] = {**e.get("args", {}), "shapes": [{"a": 1}, {"b": [2]}]}
    out["tricky.json"] = json.dumps({**doc, "traceEvents": tricky}).encode()
    # A broken event (a list where a pid goes; a stray byte) across the chunks.
    broken = [dict(e) for e in events]
    broken[len(broken) // 2]["pid"] = [1, 2]
    out["bad_pid.json"] = json.dumps({**doc, "traceEvents": broken}).encode()
    mid = len(text) // 2
    out["stray_byte.json"] = text[:mid] + b"\x01" + text[mid:]
    in_args = text.index(b'"', text.index(b'"args"', mid) + len(b'"args"')) + 1  # raw args
    out["not_utf8.json"] = text[:in_args] + b"\xff" + text[in_args:]
    paths = {}
    for name, data in out.items():
        (tmp / name).write_bytes(data)
        paths[name] = tmp / name
    return paths


def _outcome(load: Any, path: Path) -> tuple[str, Any]:
    try:
        return "loaded", load(path)
    except TraceError as exc:
        return "error", str(exc)


@pytest.mark.slow
def test_every_shape_of_file_loads_as_the_careful_reader_loads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the file — compressed in members or frames, with a BOM, a bare array,
    metadata after the events, cut short, damaged at a chunk boundary — a load gives what
    the careful reader gives: the same tables and warnings, or the same one-line error."""
    monkeypatch.setattr(chunked_read, "CHUNK_BYTES", 1000)  # boundaries everywhere
    outcomes = {}
    for workers in (1, 2):
        monkeypatch.setenv("EXPLORER_LOAD_WORKERS", str(workers))
        for name, path in _variants(tmp_path).items():
            got, want = (
                _outcome(lambda p: explorer.load(p, use_cache=False), path),
                _outcome(_careful, path),
            )
            assert got[0] == want[0], (name, got, want)
            if got[0] == "error":
                assert got[1] == want[1] and "\n" not in got[1], name
            else:
                assert_same_trace(got[1], want[1])
            outcomes[name] = got[0]
    assert outcomes["pretty.json"] == outcomes["two_members.json.gz"] == "loaded"
    assert outcomes["bad_pid.json"] == outcomes["stray_byte.json"] == "error"
    assert outcomes["not_utf8.json"] == "error"


@pytest.mark.slow
def test_quick_split_takes_well_formed_files_and_refuses_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quick path takes the usual shapes itself (no second read) and hands every
    damaged or unusual file to the careful reader. (``tricky.json`` may go either way:
    correct both ways, see the test above.)"""
    monkeypatch.setattr(chunked_read, "CHUNK_BYTES", 1000)
    paths = _variants(tmp_path)
    del paths["tricky.json"]
    quick = {
        "pretty.json",
        "bom.json",
        "bare_array.json",
        "two_members.json.gz",
        "padded.json.gz",
        "frames.json.zst",
        "metadata_after.json",
    }
    for name, path in paths.items():
        try:
            chunked_read.read_chunked(path)
            took = True
        except chunked_read.NeedsCareful:
            took = False
        assert took == (name in quick), name


def test_idle_work_runs_once_while_the_decode_workers_parse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The work :func:`while_waiting` leaves runs once, in this thread, while the decode
    workers are alive (the load is waiting on them), and the tables are those of a load
    without it; a failure in the work is dropped, and the load goes on."""
    import multiprocessing
    import threading

    from explorer.processes import while_waiting

    path = SAMPLE_TRACES / "cpu_cnn.pt.trace.json.gz"
    seen: list[tuple[int, bool]] = []

    def work() -> None:
        seen.append(
            (
                len(multiprocessing.active_children()),
                threading.current_thread() is threading.main_thread(),
            )
        )
        raise RuntimeError("optional work failing is the caller's to redo")

    with while_waiting(work):
        read = _chunked(path, 2_000, 2, monkeypatch)
    # once, on the main thread, with the two decode workers (and whatever other children
    # this test process has) alive
    assert len(seen) == 1 and seen[0][0] >= 2 and seen[0][1]
    assert_same_trace(read, _careful(path))


def test_idle_work_without_a_wait_never_runs_and_is_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Decoded in this process (no workers to wait on), the work does not run, and once
    the block ends it is gone: a later load with workers does not run it."""
    from explorer.processes import while_waiting

    path = SAMPLE_TRACES / "cpu_cnn.pt.trace.json.gz"
    calls: list[int] = []
    with while_waiting(lambda: calls.append(1)):
        _chunked(path, 2_000, 1, monkeypatch)
    _chunked(path, 2_000, 2, monkeypatch)
    assert calls == []


def test_idle_work_left_off_the_main_thread_is_not_the_main_threads_to_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Work another thread leaves while the main thread loads with workers is not run by
    the main thread's waits (it is that thread's own)."""
    import threading

    from explorer.processes import while_waiting

    path = SAMPLE_TRACES / "cpu_cnn.pt.trace.json.gz"
    calls: list[int] = []
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with while_waiting(lambda: calls.append(1)):
            inside.set()
            release.wait(60)

    thread = threading.Thread(target=other)
    thread.start()
    inside.wait(60)
    try:
        _chunked(path, 2_000, 2, monkeypatch)
    finally:
        release.set()
        thread.join(60)
    assert calls == []
