"""A trace opened from the store maps its tables read-only; what the analyses have read of
them stays resident in the process until its stages let go of memory
(:func:`~explorer.trace.memory_limits.release_freed_memory`): then the mapped pages are
unmapped from the process, and read again from the page cache when next touched."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import explorer
from explorer.trace.memory_limits import release_freed_memory

TRACE = "cpu_transformer.pt.trace.json.gz"


def _resident_kb(under: Path) -> int:
    """kB resident of this process's mappings of files under ``under`` (``/proc/self/smaps``)."""
    total, mine = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if len(head) >= 5 and "-" in head[0] and ":" in head[3]:  # a mapping's first line
                mine = len(head) >= 6 and head[5].startswith(str(under))
            elif mine and line.startswith("Rss:"):
                total += int(head[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="Linux's /proc/self/smaps")
def test_the_mapped_tables_pages_are_let_go_and_read_again(
    sample_traces: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path))
    explorer.load(sample_traces / TRACE)  # parsed, its entry written
    trace = explorer.load(sample_traces / TRACE).data  # opened from the entry: mapped
    columns = ("ts", "dur", "parent", "track")
    before = {c: int(trace.slices[c].to_numpy().astype(np.int64).sum()) for c in columns}
    touched = _resident_kb(tmp_path.resolve())
    assert touched > 16, "the tables read are resident, mapped from the entry"
    release_freed_memory()
    assert _resident_kb(tmp_path.resolve()) < touched / 4
    again = {c: int(trace.slices[c].to_numpy().astype(np.int64).sum()) for c in columns}
    assert again == before  # read again, from the page cache: the same values
    assert _resident_kb(tmp_path.resolve()) > 0
