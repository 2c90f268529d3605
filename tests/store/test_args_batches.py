"""The store's args, written a batch of slices at a time and read back from the mapped
file one slice (or one range of slices) at a time, are exactly the reader's bytes in
slice order — across batch boundaries, in both table formats, from a blob whose rows are
in file order (a permutation of the slices) and that may be a view of a mapped file."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from explorer.store.tables import ARGS_BATCH, encode_args, open_args
from explorer.trace.args_store import ArgsStore, binary_parts

N = 2 * ARGS_BATCH + 1234  # three batches, the last one short


def _rows(n: int, rng: np.random.Generator) -> list[bytes]:
    """Distinct JSON objects of varied length, some empty (``{}``)."""
    sizes = rng.integers(0, 40, n)
    return [
        b"{}" if s == 0 else b'{"i":%d,"pad":"%s"}' % (i, b"x" * int(s))
        for i, s in enumerate(sizes)
    ]


@pytest.fixture(scope="module")
def reader_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[ArgsStore, list[bytes]]:
    """An in-memory store as the reader makes it, its blob mapped from a spill file; and
    each slice's expected bytes."""
    rng = np.random.default_rng(3)
    rows = _rows(N, rng)  # in file order
    index = rng.permutation(N)  # slice i is row index[i]
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    spill = tmp_path_factory.mktemp("spill") / "args.bin"
    spill.write_bytes(b"".join(rows))
    with open(spill, "rb") as f:
        blob = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    store = ArgsStore(blob=blob, offsets=offsets, index=index)
    return store, [rows[r] for r in index]


@pytest.mark.parametrize("table_format", ["arrow", "parquet"])
def test_written_in_batches_read_back_exactly(
    reader_store: tuple[ArgsStore, list[bytes]], table_format: str, tmp_path: Path
) -> None:
    store, want = reader_store
    path = tmp_path / f"args.{table_format}"
    with pa.OSFile(str(path), "wb") as sink:
        encode_args(store, N, sink, table_format)
    with open(path, "rb") as f:
        data = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    back = open_args(data, table_format)
    assert len(back) == N
    # every slice, one at a time (batch i // ARGS_BATCH, row i % ARGS_BATCH)
    assert [back.raw(i) for i in range(N)] == want
    # ranges across batch boundaries, against the same slices one by one
    for lo, hi in [(0, 1), (ARGS_BATCH - 5, ARGS_BATCH + 5), (10, N), (N - 1, N)]:
        rows, offsets = binary_parts(back.slice_rows(lo, hi))
        got = [bytes(rows[a:b]) for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
        assert got == want[lo:hi]
    assert back.get(ARGS_BATCH) == store.get(ARGS_BATCH)
    blob, offsets, index = back.arrays()
    assert bytes(blob[offsets[index[N - 1]] : offsets[index[N - 1] + 1]]) == want[N - 1]


def test_reader_store_ranges_are_in_slice_order(
    reader_store: tuple[ArgsStore, list[bytes]],
) -> None:
    store, want = reader_store
    rows, offsets = binary_parts(store.slice_rows(ARGS_BATCH - 3, ARGS_BATCH + 3))
    got = [bytes(rows[a:b]) for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
    assert got == want[ARGS_BATCH - 3 : ARGS_BATCH + 3]


def test_a_batch_of_another_size_is_refused(tmp_path: Path) -> None:
    """An args file whose batches are not the store's size would map slices to the wrong
    rows: it is refused (the entry then reads as damaged)."""
    column = pa.array([b"{}"] * 10, pa.large_binary())
    ids = pa.array(np.arange(10, dtype=np.int64))
    batch = pa.record_batch([ids, column], names=["slice_id", "json"])
    path = tmp_path / "args.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, batch.schema) as w:
        w.write_batch(batch)
        w.write_batch(batch)
    with pytest.raises(ValueError, match="layout"):
        open_args(memoryview(path.read_bytes()), "arrow")
