"""Any damage to a store entry is detected before any data is used; through the cache it
means a silent re-parse whose result is identical to a fresh parse, never wrong data."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import explorer
from explorer import store
from explorer.readers import read as load_trace
from explorer.store import cache
from explorer.store.header import HEADER
from tests.conftest import ROOT, SAMPLE_TRACES
from tests.store.test_store_roundtrip import assert_same_model

TRACE = SAMPLE_TRACES / "cpu_compile_graph_break.pt.trace.json.gz"
OTHER = SAMPLE_TRACES / "cpu_slow_dataloader.pt.trace.json.gz"


@pytest.fixture(params=["parquet", "arrow"])
def entry(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    model = load_trace(TRACE, use_cache=False)
    return store.write_trace(model, tmp_path / "entry", table_format=request.param)


def _files(entry: Path) -> list[Path]:
    return sorted(entry.iterdir())


def _flip(path: Path, bit: int) -> None:
    data = bytearray(path.read_bytes())
    data[bit // 8] ^= 1 << (bit % 8)
    path.write_bytes(bytes(data))


def test_every_file_is_covered(entry: Path) -> None:
    fmt = json.loads((entry / HEADER).read_text())["table_format"]
    names = {p.name for p in _files(entry)}
    assert names == {HEADER, "metadata.json", f"args.{fmt}"} | {f"{t}.{fmt}" for t in store.TABLES}


def test_single_bit_flips_anywhere_in_every_file_are_detected(entry: Path) -> None:
    rng = random.Random(11)
    for path in _files(entry):
        nbits = path.stat().st_size * 8
        # The first and last bytes (Parquet magic and footer, JSON braces) and 60 more.
        bits = sorted({0, 7, nbits - 1, nbits - 8, *rng.sample(range(nbits), min(60, nbits))})
        original = path.read_bytes()
        for bit in bits:
            _flip(path, bit)
            with pytest.raises(store.StoreDamaged):
                store.open_trace(entry)
            path.write_bytes(original)
    store.open_trace(entry)  # intact again


def test_header_byte_flips_are_detected(entry: Path) -> None:
    """The header holds the checksums and the categories: flipping the low bit of any of its
    bytes (digits, category names, sizes; all of the first 300, then 500 sampled: each
    rewrite costs a few ms here) must never yield an entry that opens."""
    path = entry / HEADER
    original = path.read_bytes()
    rest = random.Random(5).sample(range(300, len(original)), min(500, len(original) - 300))
    for i in [*range(300), *rest]:
        _flip(path, i * 8)
        with pytest.raises(store.StoreDamaged):
            store.open_trace(entry)
        path.write_bytes(original)


def test_truncation_and_deletion_of_each_file_are_detected(entry: Path) -> None:
    for path in _files(entry):
        original = path.read_bytes()
        for size in (0, len(original) // 2, len(original) - 1):
            path.write_bytes(original[:size])
            with pytest.raises(store.StoreDamaged):
                store.open_trace(entry)
        path.unlink()
        with pytest.raises(store.StoreDamaged):
            store.open_trace(entry)
        path.write_bytes(original)


def test_swapped_files_and_versions_are_detected(entry: Path, tmp_path: Path) -> None:
    fmt = json.loads((entry / HEADER).read_text())["table_format"]
    other = store.write_trace(
        load_trace(OTHER, use_cache=False), tmp_path / "other", table_format=fmt
    )
    for name in (f"slices.{fmt}", f"args.{fmt}", "metadata.json", HEADER):
        saved = (entry / name).read_bytes()
        shutil.copy(other / name, entry / name)  # a file from another trace's entry
        with pytest.raises(store.StoreDamaged):
            store.open_trace(entry)
        (entry / name).write_bytes(saved)
    doc = json.loads((entry / HEADER).read_text())
    for version in (0, store.STORE_VERSION + 1, "1", None):
        (entry / HEADER).write_text(json.dumps({**doc, "version": version}))
        with pytest.raises(store.StoreDamaged, match="version|damaged"):
            store.open_trace(entry)


def _damage(kind: str, entry: Path, rng: random.Random) -> None:
    files = _files(entry)
    path = files[rng.randrange(len(files))]
    if kind == "flip":
        _flip(path, rng.randrange(path.stat().st_size * 8))
    elif kind == "truncate":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])
    elif kind == "delete":
        path.unlink()
    elif kind == "empty dir":
        for p in files:
            p.unlink()
    elif kind == "old pickle entry":  # what the previous cache left behind
        for p in files:
            p.unlink()
        (entry / "tables.pkl").write_bytes(b"\x80\x05N.")
        (entry / "stamp.json").write_text("{}")
    elif kind == "version":
        doc = json.loads((entry / HEADER).read_text())
        (entry / HEADER).write_text(json.dumps({**doc, "version": store.STORE_VERSION + 1}))


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind", ["flip", "truncate", "delete", "empty dir", "old pickle entry", "version"]
)
def test_damaged_cache_entry_means_a_silent_rebuild(kind: str, tmp_path: Path) -> None:
    trace = tmp_path / TRACE.name
    shutil.copy(TRACE, trace)
    fresh = load_trace(trace, use_cache=False)
    explorer.load(trace)
    entry = cache.entry_path(trace)
    for seed in range(3):
        _damage(kind, entry, random.Random(seed))
        again = explorer.load(trace)  # no warning, no error: parsed again
        assert_same_model(fresh, again.data)
        assert cache.load_cached(trace) is not None  # and the entry was rewritten
        assert_same_model(fresh, cache.load_cached(trace))


def test_sql_on_a_damaged_store_entry_is_one_line_exit_2(entry: Path) -> None:
    (slices,) = entry.glob("slices.*")
    _flip(slices, 1000)
    out = subprocess.run(
        [sys.executable, "-m", "explorer", "sql", str(entry), "SELECT count(*) FROM slices"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and f"{slices.name} is damaged" in out.stderr
