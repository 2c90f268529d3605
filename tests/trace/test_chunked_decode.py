"""Chunks are decoded on their own and merged by concatenation: however the event array is
cut, the tables (same rows, same ids, same vocabularies, same args) are those of one pass.

Checked on every sample trace and every real trace in ../shared/traces, by loading each
with chunks of very different sizes (1 event, 7 events, the default) and comparing every
table, the metadata and the raw args."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from explorer.trace.build import build
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
