"""A compressed trace's JSON size, known before it is inflated: what the file records
(gzip's ISIZE, zstd's frame content size) where that is plausible, else the guess of
``COMPRESSION_GUESS`` times its size. The load chooses its decode workers and whether to
spill with it; real traces inflate 13-19x, and the guess of 10x kept a 55 MB H100 trace
in one process."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard

from explorer.trace.chunked_read import (
    COMPRESSION_GUESS,
    PARALLEL_BYTES,
    inflated_size,
)

SHARED = Path(__file__).resolve().parents[3] / "shared" / "traces" / "tracelens"


def _text(events: int) -> bytes:
    """A trace's JSON that compresses about as well as a real one (11-13x here)."""
    rows = (
        f'{{"ph":"X","name":"aten::op_{k % 97}","pid":1,"tid":{k % 7},"ts":{k * 3},'
        f'"dur":{k % 13},"args":{{"External id":{k}}}}}'
        for k in range(events)
    )
    return b'{"traceEvents":[' + ",".join(rows).encode() + b"]}"


def _size(data: bytes, kind: str) -> tuple[int, int]:
    f = io.BytesIO(data)
    got = inflated_size(f, len(data), kind)
    return got, f.tell()


def test_a_gzip_file_says_its_size() -> None:
    text = _text(50_000)
    data = gzip.compress(text)
    assert len(text) > COMPRESSION_GUESS * len(data)  # the guess would fall short
    assert _size(data, "gzip") == (len(text), 0)  # exact, and the file left at its start


def test_a_gzip_file_of_two_members_is_never_taken_for_more_than_it_holds() -> None:
    text = _text(50_000)
    half = len(text) // 2
    data = gzip.compress(text[:half]) + gzip.compress(text[half:])
    got, _ = _size(data, "gzip")
    assert COMPRESSION_GUESS * len(data) <= got <= len(text)


def test_trailing_bytes_after_a_gzip_member_give_the_guess() -> None:
    data = gzip.compress(_text(20_000)) + b"\xff\xff\xff\x7f"  # 2 GiB "recorded"
    assert _size(data, "gzip") == (COMPRESSION_GUESS * len(data), 0)


def test_a_zstd_frame_with_its_content_size_says_it() -> None:
    text = _text(50_000)
    data = zstandard.ZstdCompressor(level=3).compress(text)
    assert COMPRESSION_GUESS * len(data) < len(text) < 100 * len(data)
    assert _size(data, "zstd") == (len(text), 0)


def test_an_implausible_ratio_gives_the_guess() -> None:
    data = zstandard.ZstdCompressor(level=3).compress(b" " * (64 << 20))  # 1000s of x
    assert _size(data, "zstd") == (COMPRESSION_GUESS * len(data), 0)


def test_a_streamed_zstd_frame_without_its_size_gives_the_guess() -> None:
    out = io.BytesIO()
    with zstandard.ZstdCompressor(level=3, write_content_size=False).stream_writer(
        out, closefd=False
    ) as w:
        w.write(_text(20_000))
    data = out.getvalue()
    assert _size(data, "zstd") == (COMPRESSION_GUESS * len(data), 0)


def test_a_tiny_or_damaged_file_gives_the_guess() -> None:
    assert _size(b"\x1f\x8b\x08", "gzip") == (3 * COMPRESSION_GUESS, 0)
    assert _size(b"\x28\xb5\x2f\xfdjunk", "zstd")[0] == 8 * COMPRESSION_GUESS


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/traces (not in a user's clone)")
def test_the_large_real_h100_trace_is_decoded_by_workers() -> None:
    path = SHARED / "h100__google_owlv2-large-patch14-ensemble__1016001.json.gz"
    with open(path, "rb") as f:
        size = inflated_size(f, os.path.getsize(path), "gzip")
    assert size == len(gzip.decompress(path.read_bytes()))
    assert size >= PARALLEL_BYTES > COMPRESSION_GUESS * os.path.getsize(path)
    # what a user's load decides: a fresh process, its only thread (pytest's workers run
    # threads of their own, where no load forks)
    code = "import sys; from explorer.trace.chunked_read import load_workers; "
    code += "print(load_workers(int(sys.argv[1])))"
    env = {k: v for k, v in os.environ.items() if k != "EXPLORER_LOAD_WORKERS"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    out = subprocess.run(
        [sys.executable, "-c", code, str(size)], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == (max(2, min(len(os.sched_getaffinity(0)), 8)))
