"""Analysis results stored beside a cache entry's tables (explorer/store/results.py): a
reopened trace gets back exactly what a fresh computation gives, without recomputing, and
never a result of another trace file, another step option or other code."""

from __future__ import annotations

import dataclasses
import io
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from explorer.analysis.breakdown import breakdown
from explorer.analysis.findings import findings
from explorer.cli.main import main
from explorer.export import to_perfetto
from explorer.readers import read as load_trace
from explorer.report import document, render
from explorer.store import result_files, results
from explorer.trace.model import TraceData
from tests.conftest import SAMPLE_TRACES, shared_trace_files

SAMPLES = sorted(SAMPLE_TRACES.glob("*.json.gz"))
#: A GPU trace with NCCL, memcpy and flows (the big benchmark's base), when ../shared is here.
GPU = [p for p in shared_trace_files() if p.name.startswith("nccl_parser_config")]
#: A pattern that names some of the sample traces' steps only.
SOME_STEPS = r"ProfilerStep#\d*[13579]$"


def assert_same(a: Any, b: Any, where: str = "") -> None:
    """Equal value for value, with the same types and dtypes all the way down."""
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b, check_exact=True, check_categorical=True)
        for col in a.columns:
            assert a[col].dtype == b[col].dtype, (where, col)
            if isinstance(a[col].dtype, pd.CategoricalDtype):
                assert a[col].cat.categories.dtype == b[col].cat.categories.dtype, (where, col)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert np.array_equal(a, b), where
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    else:
        assert a == b, (where, a, b)


def _kept(trace: TraceData) -> dict[tuple[str, Any], Any]:
    """The memo's results that the store keeps, by (name, options)."""
    return {k: v for k, v in trace.memo._values.items() if k[0] in results.STORED_RESULTS}


def _first_and_reopened(path: Path, root: Path) -> tuple[TraceData, str, TraceData]:
    first = load_trace(path, store=root)  # parses and writes the entry
    report = render(first, "json")
    return first, report, load_trace(path, store=root)


@pytest.mark.parametrize("path", SAMPLES + GPU, ids=lambda p: p.name)
def test_reopened_trace_reads_every_result_back_exactly(path: Path, tmp_path: Path) -> None:
    first, report, again = _first_and_reopened(path, tmp_path)
    computed = _kept(first)
    names = {name for name, _ in computed}
    assert {"steps", "breakdown", "findings", "critical_path", "by_source"} <= names
    assert render(again, "json") == report
    # The repeat report read them: the graph under the critical path was never built.
    assert "dependency_graph" not in again.memo.names()
    assert "reason_timelines" not in again.memo.names()
    assert again.memo.store is not None
    for (name, options), value in computed.items():
        assert_same(value, again.memo.store.load(name, options), name)
    # And what was stored is what a trace that never saw a store computes.
    fresh = load_trace(path, use_cache=False)
    assert render(fresh, "json") == report


def test_step_pattern_has_its_own_results(tmp_path: Path) -> None:
    path = SAMPLE_TRACES / "cpu_cnn.pt.trace.json.gz"
    _, default_report, again = _first_and_reopened(path, tmp_path)
    again = again.with_steps(SOME_STEPS)
    some = render(again, "json")
    assert some != default_report
    assert "reason_timelines" in again.memo.names()  # computed: none stored for the pattern
    fresh = load_trace(path, use_cache=False)
    fresh = fresh.with_steps(SOME_STEPS)
    assert render(fresh, "json") == some
    third = load_trace(path, store=tmp_path)
    assert render(third, "json") == default_report  # the default's results are still there
    third = third.with_steps(SOME_STEPS)
    assert render(third, "json") == some
    assert "reason_timelines" not in third.memo.names()  # the pattern's, read back
    inner = third.with_steps(SOME_STEPS, "innermost")
    render(inner, "json")
    assert "reason_timelines" in inner.memo.names()  # the nesting is part of the key too


def test_a_repeat_report_reads_its_document_back(tmp_path: Path) -> None:
    """The report's whole document is stored: a repeat report computes nothing at all (not
    even the steps), and says the path it was opened from; another ``top`` or ``step`` is
    another document; what a caller does to the document it got is not what the next
    caller gets."""
    path = SAMPLE_TRACES / "cpu_slow_dataloader.pt.trace.json.gz"
    _, report, again = _first_and_reopened(path, tmp_path)
    assert render(again, "json") == report
    assert again.memo.names() == set()  # nothing computed, nor read back one by one
    doc = document(again)
    doc["findings"].clear()
    assert document(again)["findings"], "the stored document was changed through a caller"
    top1 = render(again, "json", top=1)
    assert top1 != report and top1 == render(load_trace(path, use_cache=False), "json", top=1)
    step1 = render(again, "json", step=1)
    assert step1 == render(load_trace(path, use_cache=False), "json", step=1)
    copy = tmp_path / "elsewhere" / path.name
    copy.parent.mkdir()
    shutil.copy(path, copy)
    moved = document(load_trace(copy, store=tmp_path))
    assert moved["trace"]["path"] == str(copy)


def test_a_changed_trace_file_never_gets_the_old_results(tmp_path: Path) -> None:
    trace = tmp_path / "run.pt.trace.json.gz"
    shutil.copy(SAMPLE_TRACES / "cpu_cnn.pt.trace.json.gz", trace)
    _, old_report, _ = _first_and_reopened(trace, tmp_path / "cache")
    shutil.copy(SAMPLE_TRACES / "cpu_transformer.pt.trace.json.gz", trace)
    changed = load_trace(trace, store=tmp_path / "cache")
    new_report = render(changed, "json")
    assert new_report != old_report
    assert "reason_timelines" in changed.memo.names()  # computed again, not read
    expected = render(load_trace(trace, use_cache=False), "json")
    assert new_report == expected


def test_each_stored_file_is_listed_with_its_own_size_and_checksum(tmp_path: Path) -> None:
    """The size and CRC-32 a result lists for each of its files (read back a block at a
    time, never whole) are those of the bytes on disk, by zlib, and every file is one an
    Arrow reader opens whole."""
    import json
    import zlib

    import pyarrow as pa

    path = SAMPLE_TRACES / "cpu_transformer.pt.trace.json.gz"
    _first_and_reopened(path, tmp_path)
    listings = sorted(tmp_path.glob(f"*/{results.RESULTS_DIR}/*/{results.VALUE_FILE}"))
    files = 0
    for listing in listings:
        doc = json.loads(listing.read_text())
        for i, meta in enumerate(doc["files"]):
            data = (listing.parent / f"{i}.arrow").read_bytes()
            assert meta == {"bytes": len(data), "crc32": zlib.crc32(data)}, listing
            assert pa.ipc.open_file(pa.BufferReader(data)).read_all().num_rows >= 0
            files += 1
    assert files >= 5  # the breakdown's, the findings', the critical path's frames...


def test_damaged_or_foreign_results_are_computed_again(tmp_path: Path) -> None:
    path = SAMPLE_TRACES / "cpu_transformer.pt.trace.json.gz"
    _, report, _ = _first_and_reopened(path, tmp_path)
    stored = sorted(tmp_path.glob(f"*/{results.RESULTS_DIR}/*/0.arrow"))
    stored += sorted(tmp_path.glob(f"*/{results.RESULTS_DIR}/*/{results.TREE_FILE}"))
    assert stored
    for f in stored:  # one byte changed in every table and every value tree of every result
        data = bytearray(f.read_bytes())
        data[len(data) // 2] ^= 0xFF
        f.write_bytes(bytes(data))
    damaged = load_trace(path, store=tmp_path)
    assert render(damaged, "json") == report
    assert "reason_timelines" in damaged.memo.names()


def test_other_analysis_code_never_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = SAMPLE_TRACES / "cpu_cnn.pt.trace.json.gz"
    _, report, again = _first_and_reopened(path, tmp_path)
    assert again.memo.store is not None
    assert again.memo.store.load("breakdown", (None,)) is not results.MISSING
    monkeypatch.setattr(result_files, "_code_digest", "another version of the analyses")
    assert again.memo.store.load("breakdown", (None,)) is results.MISSING
    other = load_trace(path, store=tmp_path)
    assert render(other, "json") == report
    assert "reason_timelines" in other.memo.names()


def test_a_store_that_cannot_keep_results_still_reports(tmp_path: Path) -> None:
    path = SAMPLE_TRACES / "cpu_cnn.pt.trace.json.gz"
    first = load_trace(path, store=tmp_path)
    (entry,) = [d for d in tmp_path.iterdir() if d.is_dir()]
    (entry / results.RESULTS_DIR).write_text("not a directory")
    report = render(first, "json")
    again = load_trace(path, store=tmp_path)
    assert render(again, "json") == report
    assert "reason_timelines" in again.memo.names()


def test_no_store_without_the_cache(tmp_path: Path) -> None:
    trace = load_trace(SAMPLE_TRACES / "cpu_cnn.pt.trace.json.gz", use_cache=False)
    assert trace.memo.store is None


def test_an_export_reads_what_the_last_one_stored(tmp_path: Path) -> None:
    path = GPU[0] if GPU else SAMPLE_TRACES / "cpu_transformer.pt.trace.json.gz"
    to_perfetto(load_trace(path, store=tmp_path / "cache"), tmp_path / "first.pftrace")
    again = load_trace(path, store=tmp_path / "cache")
    to_perfetto(again, tmp_path / "again.pftrace")
    assert "dependency_graph" not in again.memo.names()  # findings, path and waits read back
    to_perfetto(load_trace(path, use_cache=False), tmp_path / "fresh.pftrace")
    fresh = (tmp_path / "fresh.pftrace").read_bytes()
    assert (tmp_path / "first.pftrace").read_bytes() == fresh
    assert (tmp_path / "again.pftrace").read_bytes() == fresh


def test_an_export_after_a_report_reads_its_findings_and_path(tmp_path: Path) -> None:
    """The export writes the report's findings and critical path: after a report it reads
    them (and the slices' source frames) from the store and builds no graph (the analyses
    they come from never run), and
    writes the same bytes as an export that computed everything."""
    path = GPU[0] if GPU else SAMPLE_TRACES / "cpu_slow_dataloader.pt.trace.json.gz"
    _first_and_reopened(path, tmp_path / "cache")
    again = load_trace(path, store=tmp_path / "cache")
    to_perfetto(again, tmp_path / "after.pftrace")
    assert {"findings", "critical_path", "frame_codes"} <= again.memo.names()
    # nor the slices' source lines (each slice's stack walked) for their annotations
    assert not {"dependency_graph", "steps", "breakdown", "user_frames"} & again.memo.names()
    to_perfetto(load_trace(path, use_cache=False), tmp_path / "fresh.pftrace")
    assert (tmp_path / "after.pftrace").read_bytes() == (tmp_path / "fresh.pftrace").read_bytes()


def test_sql_reads_the_stored_breakdown_and_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = SAMPLE_TRACES / "cpu_slow_dataloader.pt.trace.json.gz"
    _first_and_reopened(path, tmp_path)
    query = "SELECT step, device, category, ns FROM breakdown ORDER BY ALL"
    assert main(["sql", str(path), query, "--store", str(tmp_path), "--format", "csv"]) == 0
    got = pd.read_csv(io.StringIO(capsys.readouterr().out), keep_default_na=False)
    fresh = load_trace(path, use_cache=False)
    want = (
        breakdown(fresh).astype({"category": str}).sort_values(["step", "device", "category", "ns"])
    )
    assert got.to_dict("records") == want.to_dict("records")
    query = "SELECT kind, time_lost_ns FROM findings ORDER BY id"
    assert main(["sql", str(path), query, "--store", str(tmp_path), "--format", "csv"]) == 0
    got = pd.read_csv(io.StringIO(capsys.readouterr().out), keep_default_na=False)
    assert [(f.kind, f.time_lost_ns) for f in findings(fresh)] == list(
        got.itertuples(index=False, name=None)
    )
    assert len(got)  # the slow data loader is found


# -- a cache entry written while the analyses run (explorer.store.cache.CacheWrite) --------


def test_a_deferred_cache_write_stores_what_was_computed_before_it_was_written(
    tmp_path: Path,
) -> None:
    """A report writes a just-parsed trace's entry while it builds the graph: the results
    computed before the entry exists (the steps, a view's under other step options) are
    stored once it does, the entry's tables are those a plain first load writes, and
    nothing is stored, or found stored, before."""
    from explorer.analysis.steps import steps
    from explorer.store.cache import cache_write_of

    path = SAMPLE_TRACES / "cpu_cnn.pt.trace.json.gz"
    deferred = load_trace(path, store=tmp_path / "deferred", defer_cache_write=True)
    write = cache_write_of(deferred)
    assert write is not None
    assert not list((tmp_path / "deferred").iterdir())  # nothing written yet
    view = deferred.with_steps(SOME_STEPS)
    want = steps(deferred), steps(view)
    assert deferred.memo.store is not None and view.memo.store is not None
    assert not deferred.memo.store.has("steps", (None,))  # nothing stored: no entry yet
    assert write.finish() is None and write.finish() is None  # once; the second is a no-op
    assert deferred.memo.store.has("steps", (None,))
    assert view.memo.store.has("steps", (None,))
    plain = load_trace(path, store=tmp_path / "plain")  # a first load: its entry at once
    (entry,) = (tmp_path / "deferred").iterdir()
    (plain_entry,) = (tmp_path / "plain").iterdir()
    for table in ("slices", "tracks", "flows", "counters", "instants", "memory", "args"):
        a = (entry / f"{table}.arrow").read_bytes()
        assert a == (plain_entry / f"{table}.arrow").read_bytes(), table
    assert plain.memo.store is not None
    again = load_trace(path, store=tmp_path / "deferred")
    assert again.memo.store is not None
    assert_same(again.memo.store.load("steps", (None,)), want[0], "steps")
    again_view = again.with_steps(SOME_STEPS)
    assert again_view.memo.store is not None
    assert_same(again_view.memo.store.load("steps", (None,)), want[1], "the view's steps")
    assert len(want[1]) < len(want[0])


def test_a_deferred_cache_write_that_fails_warns_once_and_stores_nothing(tmp_path: Path) -> None:
    """An entry that cannot be written (its cache directory is a file) leaves the trace
    loaded, says why in one ``not cached`` warning, and keeps no result anywhere."""
    from explorer.analysis.steps import steps
    from explorer.store.cache import cache_write_of

    blocked = tmp_path / "cache"
    blocked.write_text("a file where the cache directory should be")
    trace = load_trace(
        SAMPLE_TRACES / "cpu_cnn.pt.trace.json.gz", store=blocked, defer_cache_write=True
    )
    write = cache_write_of(trace)
    assert write is not None
    steps(trace)
    failed = write.finish()
    assert failed is not None and str(blocked) in failed
    warnings = [w for w in trace.metadata["warnings"] if w.startswith("not cached")]
    assert len(warnings) == 1 and failed in warnings[0]
    assert write.finish() == failed  # finished once: no second warning
    assert len([w for w in trace.metadata["warnings"] if w.startswith("not cached")]) == 1
    assert trace.memo.store is not None and not trace.memo.store.has("steps", (None,))
    assert blocked.read_text().startswith("a file")
