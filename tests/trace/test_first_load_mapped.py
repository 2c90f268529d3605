"""A first load hands back the trace as its new cache entry holds it: the tables mapped
from the entry's files, the parse's own copies freed — what every later open gets; a first
report's trace adopts them once its entry, written while it analyses, is written; and an
entry's files, once checked, are not held resident by the process that opened it.

On Linux, where ``/proc/self/smaps`` says which files a process maps and how much of each
it holds (the CI's platform)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

import explorer
from explorer.readers import json_trace
from explorer.store import cache
from tests.conftest import SAMPLE_TRACES

TRACE = SAMPLE_TRACES / "cpu_transformer.pt.trace.json.gz"

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc/self/smaps (Linux)"
)


def _mapped_kb(path: Path) -> tuple[int, int]:
    """(size, resident) in kB of this process's mappings of ``path``."""
    size = rss = 0
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and ":" in head[3]:
            inside = len(head) >= 6 and head[5] == str(path)
        elif inside and head and head[0] == "Size:":
            size += int(head[1])
        elif inside and head and head[0] == "Rss:":
            rss += int(head[1])
    return size, rss


def _same_tables(a: explorer.Trace, b: explorer.Trace) -> None:
    for table in ("slices", "flows", "counters", "instants", "tracks", "memory"):
        pd.testing.assert_frame_equal(getattr(a.data, table), getattr(b.data, table))
    for i in (0, 1, len(a.data.slices) // 2, len(a.data.slices) - 1):
        assert a.args(i) == b.args(i)


def test_a_first_load_is_the_stored_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path))
    first = explorer.load(TRACE)
    entry = cache.cached_entry(TRACE)
    assert entry is not None
    size, _ = _mapped_kb(entry / "slices.arrow")
    assert size > 0  # the tables this process reads are the entry's, mapped
    _same_tables(first, explorer.load(TRACE, use_cache=False))
    assert first.report().render("json") == explorer.load(TRACE, use_cache=False).report().render(
        "json"
    )


def test_an_entry_gone_meanwhile_is_parsed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The entry written, then unreadable before it is opened (another process's eviction
    or a damaged disk): the file is parsed again, never a trace missing its tables."""
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(json_trace, "load_cached", lambda *_a, **_k: None)
    _same_tables(explorer.load(TRACE), explorer.load(TRACE, use_cache=False))


def test_checked_files_are_not_held_resident(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening an entry checks every file's checksum, which reads every page; the args
    file (read only when a slice's args are asked for) is not kept resident after."""
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path))
    explorer.load(TRACE)
    entry = cache.cached_entry(TRACE)
    assert entry is not None
    again = explorer.load(TRACE)
    size, rss = _mapped_kb(entry / "args.arrow")
    assert size >= 1024  # MB-sized: a meaningful share to hold
    assert rss < size // 4, (size, rss)
    assert again.args(5) == explorer.load(TRACE, use_cache=False).args(5)  # read back on demand


def test_a_first_report_builds_its_graph_beside_the_stored_tables(tmp_path: Path) -> None:
    """A first report writes the just-parsed trace's entry before it builds the dependency
    graph (while its graph-free analyses run in a child), so the graph reads the stored
    tables, mapped, and the parse's heap copies are gone before the build's peak: built
    first, the graph held the parse's columns (and they stayed under its peak)."""
    import numpy as np

    from explorer.analysis.dependency_graph import dependency_graph
    from explorer.readers import read
    from explorer.report import document

    trace = read(TRACE, store=tmp_path, defer_cache_write=True)
    parsed = trace.slices["ts"].to_numpy()
    document(trace)
    (entry,) = tmp_path.iterdir()
    stored = trace.slices["ts"].to_numpy()
    assert _mapped_kb(entry / "slices.arrow")[0] > 0
    assert not np.may_share_memory(stored, parsed)  # the tables are the entry's now
    graph = dependency_graph(trace, None, all_steps=True)  # the report's, from the memo
    assert trace.memo.available("dependency_graph", (None, True))
    assert graph.arrays is not None and np.may_share_memory(graph.arrays.ts, stored)
    fresh = explorer.load(TRACE, use_cache=False).data
    want = dependency_graph(fresh, None, all_steps=True).edges
    pd.testing.assert_frame_equal(graph.edges.reset_index(drop=True), want.reset_index(drop=True))


def test_a_deferred_write_adopts_the_stored_tables(tmp_path: Path) -> None:
    """A first report's cache entry, written while its analyses run: once written, the
    trace reads its tables from it (the parse's copies let go), equal to them, and what
    was computed before agrees with a fresh computation."""
    from explorer.analysis.breakdown import breakdown
    from explorer.readers import read
    from explorer.store.cache import cache_write_of

    trace = read(TRACE, store=tmp_path, defer_cache_write=True)
    before = breakdown(trace)  # on the parse's tables
    parsed = trace.slices
    write = cache_write_of(trace)
    assert write is not None
    assert write.finish() is None
    (entry,) = tmp_path.iterdir()
    assert trace.slices is not parsed
    assert _mapped_kb(entry / "slices.arrow")[0] > 0
    pd.testing.assert_frame_equal(trace.slices, parsed)
    fresh = explorer.load(TRACE, use_cache=False)
    pd.testing.assert_frame_equal(before, breakdown(fresh.data))
    assert trace.args_store.raw(7) == fresh.data.args_store.raw(7)
    assert trace.memo.store is not None and trace.memo.store.has("breakdown", (None,))
