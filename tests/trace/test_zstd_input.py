"""zstd-compressed traces (``.json.zst``) load exactly like their gzip originals, and a
zstd bomb is refused with one line, as a gzip bomb is."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import zstandard

import explorer
from explorer.trace.decode import GZIP_MIN_LIMIT

ROOT = Path(__file__).resolve().parents[2]
TABLES = ("slices", "tracks", "flows", "counters", "instants", "memory")


def _recompress(src: Path, dst: Path, frames: int = 1) -> bytes:
    """``src`` (gzip) recompressed to zstd in ``frames`` frames; returns the JSON text."""
    raw = gzip.decompress(src.read_bytes())
    cut = [len(raw) * k // frames for k in range(frames + 1)]
    z = zstandard.ZstdCompressor(level=3)
    dst.write_bytes(b"".join(z.compress(raw[a:b]) for a, b in zip(cut, cut[1:], strict=False)))
    return raw


@pytest.mark.parametrize("frames", [1, 3])
def test_zstd_trace_gives_the_same_tables_as_its_gzip(
    sample_traces: Path, tmp_path: Path, frames: int
) -> None:
    src = sample_traces / "cpu_transformer.pt.trace.json.gz"
    dst = tmp_path / "cpu_transformer.pt.trace.json.zst"
    _recompress(src, dst, frames)
    assert dst.stat().st_size < src.stat().st_size * 2  # really compressed, not stored
    a = explorer.load(src, use_cache=False)
    b = explorer.load(dst, use_cache=False)
    assert len(a.slices) > 1000
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)
    assert b.metadata.get("warnings", []) == a.metadata.get("warnings", [])


def test_a_directory_of_zstd_traces_is_discovered(sample_traces: Path, tmp_path: Path) -> None:
    src = sample_traces / "cpu_cnn.pt.trace.json.gz"
    _recompress(src, tmp_path / "run.pt.trace.json.zst")
    t = explorer.load(tmp_path, use_cache=False)
    assert len(t.slices) == len(explorer.load(src, use_cache=False).slices)


def test_a_cut_zstd_trace_keeps_the_events_before_the_cut(
    sample_traces: Path, tmp_path: Path
) -> None:
    src = sample_traces / "cpu_cnn.pt.trace.json.gz"
    whole = tmp_path / "whole.json.zst"
    _recompress(src, whole)
    cut = tmp_path / "cut.json.zst"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    full = explorer.load(src, use_cache=False)
    part = explorer.load(cut, use_cache=False)
    warnings = " ".join(part.metadata["warnings"])
    assert "zstd stream ends early" in warnings and "cut short" in warnings
    assert 0 < len(part.slices) < len(full.slices)


def _explorer(*argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "explorer", *argv],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=120,
    )


def test_zstd_bomb_stops_with_one_line(tmp_path: Path) -> None:
    body = b'{"traceEvents": [' + b" " * (2 * GZIP_MIN_LIMIT)
    bomb = tmp_path / "bomb.json.zst"
    bomb.write_bytes(zstandard.ZstdCompressor(level=19).compress(body))
    assert bomb.stat().st_size < 100_000  # inflates > 1000x: only a bomb does
    proc = _explorer("info", str(bomb))
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("explorer: error:"), err
    assert "zstd bomb" in lines[0] and str(bomb) in lines[0]


def test_corrupt_zstd_is_one_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json.zst"
    bad.write_bytes(b"\x28\xb5\x2f\xfd" + b"not zstd at all" * 10)
    proc = _explorer("info", str(bad))
    assert proc.returncode == 2
    assert "zstd data is corrupt" in proc.stderr.decode()
