"""The columnar cache (reuse, invalidation, never beside the trace) and directory inputs."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pandas as pd

import explorer
from explorer.store import cache


def _trace(n: int, pid: int = 1, rank: int | None = None) -> dict:
    doc = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"op{i}",
                "pid": pid,
                "tid": 1,
                "ts": 10.0 * i,
                "dur": 5.0,
                "args": {"External id": i},
            }
            for i in range(n)
        ]
    }
    if rank is not None:
        doc["distributedInfo"] = {"rank": rank, "world_size": 2}
    return doc


def test_cache_reused_then_invalidated(tmp_path: Path) -> None:
    p = tmp_path / "run.json"
    p.write_text(json.dumps(_trace(20)))
    first = explorer.load(p)
    assert cache.load_cached(p) is not None
    assert not any(x.name != "run.json" for x in tmp_path.iterdir())  # nothing written beside it
    again = explorer.load(p)
    pd.testing.assert_frame_equal(first.slices, again.slices)
    assert again.args(3) == {"External id": 3}
    # The file changes: the cache entry no longer applies.
    time.sleep(0.01)
    p.write_text(json.dumps(_trace(25)))
    os.utime(p, ns=(time.time_ns(), time.time_ns()))
    assert cache.load_cached(p) is None
    assert len(explorer.load(p).slices) == 25


def test_cache_write_failure_is_not_an_error(tmp_path: Path, monkeypatch) -> None:
    p = tmp_path / "run.json"
    p.write_text(json.dumps(_trace(3)))
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("x")
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(blocker / "cache"))
    assert len(explorer.load(p).slices) == 3


def test_tensorboard_profile_directory(tmp_path: Path) -> None:
    run = tmp_path / "logs" / "plugins" / "profile" / "2026_11_29"
    run.mkdir(parents=True)
    (run / "host_123.1700000000.pt.trace.json").write_text(json.dumps(_trace(4)))
    assert len(explorer.load(tmp_path / "logs").slices) == 4


def test_rank_directory(tmp_path: Path) -> None:
    for r in (1, 0):
        (tmp_path / f"rank-{r}.json").write_text(json.dumps(_trace(3 + r, pid=100 + r, rank=r)))
    first = explorer.load(tmp_path)
    assert first.rank == 0 and len(first.slices) == 3
    assert any("holds 2 traces" in w for w in first.metadata["warnings"])
    ranks = explorer.load_ranks(tmp_path)
    assert sorted(ranks) == [0, 1] and len(ranks[1].slices) == 4


def test_shared_sample_copied_dir(tmp_path: Path, shared_traces: Path) -> None:
    shutil.copy(shared_traces / "timeline_analysis__sampled_rank-0.json.gz", tmp_path)
    shutil.copy(shared_traces / "trace_filter__sampled_rank-1.json.gz", tmp_path)
    ranks = explorer.load_ranks(tmp_path)
    assert sorted(ranks) == [0, 1]


def test_cache_entry_is_a_parquet_store_entry_where_asked(tmp_path: Path, monkeypatch) -> None:
    p = tmp_path / "run.json"
    p.write_text(json.dumps(_trace(7)))
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path / "default-cache"))
    explorer.load(p, store=tmp_path / "elsewhere")
    assert not (tmp_path / "default-cache").exists()
    (entry,) = (tmp_path / "elsewhere").iterdir()
    assert entry == cache.entry_path(p, tmp_path / "elsewhere")
    names = {f.name for f in entry.iterdir()}
    assert names == {
        "header.json",
        "metadata.json",
        *(f"{t}.arrow" for t in ("slices", "tracks", "flows", "counters", "instants", "memory")),
        "args.arrow",
    }
    # Arrow IPC tables and args (memory-mapped on reopen): nothing to unpickle.
    assert all(f.read_bytes()[:6] == b"ARROW1" for f in entry.glob("*.arrow"))
    seen: list[str] = []
    again = explorer.load(p, store=tmp_path / "elsewhere", progress=lambda _f, m: seen.append(m))
    assert seen == ["loaded from cache"] and again.args(6) == {"External id": 6}


def test_entries_of_another_reader_version_are_parsed_again(tmp_path: Path, monkeypatch) -> None:
    p = tmp_path / "run.json"
    p.write_text(json.dumps(_trace(9)))
    explorer.load(p)
    assert cache.load_cached(p) is not None
    monkeypatch.setattr(cache, "CACHE_VERSION", cache.CACHE_VERSION + 1)  # a newer reader
    assert cache.load_cached(p) is None
    seen: list[str] = []
    assert len(explorer.load(p, progress=lambda _f, m: seen.append(m)).slices) == 9
    assert "loaded from cache" not in seen and cache.load_cached(p) is not None  # rewritten
