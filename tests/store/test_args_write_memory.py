"""Writing the slices' args to the store holds one batch of them at a time, and the file is
byte for byte what writing the same rows in one go makes.

A first load keeps the args in a spill file mapped read-only (:mod:`explorer.trace.spill`):
the store write copies them a range at a time, and lets go of the mapped pages it copied
from as it goes, so it never ends up with the whole file resident (at 1M events that was
~60 MB of the first load's peak); nor does Arrow's allocator keep the batches' copies
(~40 MB more)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq
import pytest

from explorer.store.tables import _ARGS_WRITE, ARGS_BATCH, ARGS_SCHEMA, encode_args
from explorer.trace.args_store import ArgsStore
from explorer.trace.spill import Spill, drop_resident_pages
from tests.conftest import ROOT

N = 2 * ARGS_BATCH + 1234  # three batches, the last one short
ROW = 300  # bytes a row on average: a batch's args ~20 MB, well above the page noise


def _rows(n: int, rng: np.random.Generator) -> list[bytes]:
    sizes = rng.integers(0, 2 * ROW - 16, n)
    return [b'{"i":%d,"pad":"%s"}' % (i, b"x" * int(s)) for i, s in enumerate(sizes)]


@pytest.fixture(scope="module")
def spilled(tmp_path_factory: pytest.TempPathFactory) -> tuple[ArgsStore, list[bytes], Spill]:
    """Args as a first load leaves them: the blob appended to a spill file chunk by chunk
    and mapped back; rows in file order, slice ``i`` being row ``index[i]``: each batch of
    slices a permutation of a stretch of the file (slices are ordered by track, the file
    by time), as in real traces."""
    rng = np.random.default_rng(7)
    rows = _rows(N, rng)
    index = np.concatenate(
        [lo + rng.permutation(min(ARGS_BATCH, N - lo)) for lo in range(0, N, ARGS_BATCH)]
    )
    spill = Spill(tmp_path_factory.mktemp("spill"))
    for lo in range(0, N, 10_000):
        spill.add("args_blob", b"".join(rows[lo : lo + 10_000]))
    sizes = np.array([len(r) for r in rows], np.int64)
    spill.add("args_offsets", np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))
    blob = spill.array("args_blob", np.uint8).data
    offsets = spill.array("args_offsets", np.int64)
    store = ArgsStore(blob=blob, offsets=offsets, index=index)
    return store, [rows[r] for r in index], spill


def _mapping_rss(address: int) -> int:
    """Resident bytes of this process's mapping that holds ``address`` (/proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside and head == "Rss:":
            return int(line.split()[1]) << 10
    raise AssertionError("the mapping is not in /proc/self/smaps")


class _Probe(io.FileIO):
    """A file that, at every write, notes how much of the args mapping is resident."""

    def __init__(self, path: Path, address: int) -> None:
        super().__init__(path, "w")
        self.address = address
        self.resident: list[int] = []

    def write(self, data: object) -> int:
        self.resident.append(_mapping_rss(self.address))
        return super().write(data)  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize("table_format", ["arrow", "parquet"])
def test_the_write_keeps_no_mapped_args_resident(
    spilled: tuple[ArgsStore, list[bytes], Spill], table_format: str, tmp_path: Path
) -> None:
    store, want, _ = spilled
    blob = store.arrays()[0]
    address = int(np.frombuffer(blob, np.uint8).ctypes.data)
    batch_bytes = sum(len(r) for r in want[:ARGS_BATCH])
    bytes(blob[::4096])  # every page read
    assert _mapping_rss(address) > 0.9 * len(blob)
    drop_resident_pages(blob)
    probe = _Probe(tmp_path / "args", address)
    with pa.PythonFile(probe, mode="w") as sink:
        encode_args(store, N, sink, table_format)
    assert len(probe.resident) >= 3  # written as it went, not at the end
    # each batch was copied and its pages let go of before it was written (before: the
    # args read so far stayed resident, one batch and more by the first write)
    assert max(probe.resident) < min(4 << 20, batch_bytes // 4), probe.resident
    assert _mapping_rss(address) < 4 << 20


_GIVES_BACK = r"""
import sys
from pathlib import Path
import numpy as np
import pyarrow as pa
from explorer.store.tables import ARGS_BATCH, encode_args
from explorer.trace.args_store import ArgsStore
def anonymous():
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) << 10
n, row = 3 * ARGS_BATCH, 300
offsets = np.arange(n + 1, dtype=np.int64) * row
blob = bytes(np.full(n * row, ord("x"), np.uint8))
store = ArgsStore(blob=blob, offsets=offsets, index=np.random.default_rng(1).permutation(n))
with pa.OSFile(sys.argv[1] + ".warm", "wb") as sink:  # first-use allocations
    encode_args(store, 1000, sink, "arrow")
before = anonymous()
with pa.OSFile(sys.argv[1], "wb") as sink:
    encode_args(store, n, sink, "arrow")
print(anonymous() - before)
"""


def test_the_write_gives_back_the_batches_memory(tmp_path: Path) -> None:
    """The batches' copies (~20 MB each here) are not kept by Arrow's allocator once
    written: a fresh process holds no more anonymous memory after the write than before
    (before: ~1-2 batches more, kept until the process ended)."""
    proc = subprocess.run(
        [sys.executable, "-c", _GIVES_BACK, str(tmp_path / "args.arrow")],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) < 8 << 20
    assert (tmp_path / "args.arrow").stat().st_size > 3 * ARGS_BATCH * 300


@pytest.mark.parametrize("table_format", ["arrow", "parquet"])
def test_the_file_is_what_writing_the_rows_in_one_go_makes(
    spilled: tuple[ArgsStore, list[bytes], Spill], table_format: str, tmp_path: Path
) -> None:
    """Independently: the expected rows in slice order, as Arrow arrays built from Python
    bytes, written by Arrow's writers with the store's layout (batches of ARGS_BATCH)."""
    store, want, _ = spilled
    got = tmp_path / "got"
    with pa.OSFile(str(got), "wb") as sink:
        encode_args(store, N, sink, table_format)
    expected = tmp_path / "expected"
    batches = [
        pa.record_batch(
            [
                pa.array(np.arange(lo, min(lo + ARGS_BATCH, N))),
                pa.array(want[lo : lo + ARGS_BATCH], pa.large_binary()),
            ],
            schema=ARGS_SCHEMA,
        )  # fmt: skip
        for lo in range(0, N, ARGS_BATCH)
    ]
    with pa.OSFile(str(expected), "wb") as sink:
        if table_format == "arrow":
            with pa.ipc.new_file(sink, ARGS_SCHEMA) as writer:
                for b in batches:
                    writer.write_batch(b)
        else:
            with pq.ParquetWriter(sink, ARGS_SCHEMA, **_ARGS_WRITE) as pwriter:
                for b in batches:
                    pwriter.write_batch(b, row_group_size=ARGS_BATCH)
    assert got.read_bytes() == expected.read_bytes()


def test_a_range_of_a_mapped_column_is_let_go_of_alone(tmp_path: Path) -> None:
    """``drop_resident_pages(buffer, start, stop)``: the pages of those bytes (whole pages)
    stop being resident, the others stay; a view that starts inside the mapping counts
    from its own first byte; the bytes read the same after."""
    spill = Spill(tmp_path)
    data = np.arange(16 << 20, dtype=np.uint8) * np.uint8(7)
    spill.add("col", data)
    column = spill.array("col", np.uint8)
    spill.close()
    address = int(column.ctypes.data)
    assert int(column[::4096].sum()) == int(data[::4096].sum())  # every page read
    full = _mapping_rss(address)
    assert full >= 15 << 20
    drop_resident_pages(column.data, 4 << 20, 8 << 20)
    assert full - _mapping_rss(address) == 4 << 20
    view = column[(1 << 20) + 5 :]  # starts 1 MB + 5 bytes in: its byte 3 MB - 5 is at 4 MB
    drop_resident_pages(view.data, (3 << 20) - 5 + 4096, (11 << 20) - 5)
    # bytes 4 MB + 4 KB .. 12 MB of the mapping: with the first range, 4 MB .. 12 MB
    assert full - _mapping_rss(address) == 8 << 20
    np.testing.assert_array_equal(column, data)
