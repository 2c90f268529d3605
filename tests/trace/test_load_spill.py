"""A first load too large for memory keeps its event columns in files (mapped, not held)
and gives exactly the tables an in-memory load gives; under a real memory cap that the
in-memory load exceeds, it still loads. See :mod:`explorer.trace.spill`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import explorer
from explorer.scenarios.large import write_large
from explorer.trace.build import trace_from_events
from explorer.trace.spill import Spill, drop_resident_pages
from tests.conftest import ROOT, SAMPLE_TRACES, run_with_data_limit, shared_trace_files

TRACES = sorted(SAMPLE_TRACES.glob("*.json.gz")) + shared_trace_files()[:4]
_TABLES = ("slices", "tracks", "flows", "counters", "instants", "memory")


def _load(path: Path, mode: str, monkeypatch: pytest.MonkeyPatch, cache: Path | None):
    monkeypatch.setenv("EXPLORER_LOAD_SPILL", mode)
    if cache is None:
        return explorer.load(path, use_cache=False).data
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(cache))
    return explorer.load(path).data


@pytest.mark.slow
@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_spilled_load_gives_the_in_memory_tables(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = _load(path, "never", monkeypatch, None)
    spilled = _load(path, "always", monkeypatch, tmp_path / "cache")
    for table in _TABLES:
        pd.testing.assert_frame_equal(getattr(spilled, table), getattr(held, table))
    assert [bytes(spilled.args_store.raw(i)) for i in range(len(held.slices))] == [
        bytes(held.args_store.raw(i)) for i in range(len(held.slices))
    ]
    meta = {k: v for k, v in held.metadata.items() if k != "source"}
    assert {k: v for k, v in spilled.metadata.items() if k != "source"} == meta
    # nothing of the spill is left beside the cache's entry
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".explorer-spill")]


def test_a_trace_without_flows_builds_an_empty_flows_table() -> None:
    trace = trace_from_events([{"ph": "X", "name": "a", "ts": 0, "dur": 5, "pid": 1, "tid": 1}])
    flows = trace.flows
    assert len(flows) == 0
    assert list(flows.columns) == ["src", "dst", "type", "flow_id"]
    assert flows["src"].dtype == np.int64 and isinstance(flows["type"].dtype, pd.CategoricalDtype)


def test_a_spill_left_by_a_killed_load_is_removed_once_stale(tmp_path: Path) -> None:
    old = Spill(tmp_path)
    old.add("ts", np.arange(3.0))
    os.utime(old.dir, (0, 0))  # as if long ago (more than STALE_S)
    fresh = Spill(tmp_path)  # a load running now: its directory must survive the next one
    Spill(tmp_path).close()
    assert not old.dir.exists() and fresh.dir.exists()
    fresh.close()
    assert not fresh.dir.exists()


_DIGEST = r"""
import hashlib, json, sys
import psutil
import explorer, explorer.readers, explorer.trace_api  # what a load imports
print(json.dumps({"data": psutil.Process().memory_info().data}), flush=True)
t = explorer.load(sys.argv[1], use_cache=False).data
s = t.slices
h = hashlib.sha256()
for c in ("ts", "dur", "track", "depth", "parent", "correlation", "bytes"):
    h.update(s[c].to_numpy().tobytes())
h.update(t.flows[["src", "dst"]].to_numpy().tobytes())
print(json.dumps({"slices": len(s), "digest": h.hexdigest(),
                  "args": bytes(t.args_store.raw(len(s) // 2)).decode()}))
"""


def _run(trace: Path, mode: str, limit: int | None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EXPLORER_LOAD_SPILL": mode}
    return run_with_data_limit([sys.executable, "-c", _DIGEST, str(trace)], env, limit)


def test_a_trace_larger_than_the_memory_cap_loads_by_spilling(tmp_path: Path) -> None:
    """Under a data-size limit (the private memory a process may hold) that an in-memory
    load of this 80 MB trace exceeds (it needs ~140 MB over the interpreter, 1.8x the
    JSON), the default load spills its columns and gives the uncapped load's tables."""
    trace = write_large(tmp_path / "big.json", 400_000)
    free = _run(trace, "never", None)
    assert free.returncode == 0, free.stderr
    base = json.loads(free.stdout.splitlines()[0])["data"]
    limit = base + (115 << 20)
    assert trace.stat().st_size > 75e6  # the cap is below what the JSON alone takes twice
    held = _run(trace, "never", limit)
    assert held.returncode != 0 and "does not fit in the memory" in held.stderr, held.stderr
    spilled = _run(trace, "auto", limit)
    assert spilled.returncode == 0, spilled.stderr
    assert spilled.stdout.splitlines()[1] == free.stdout.splitlines()[1]


_BUDGET = (
    "import json, sys; from explorer.trace.memory_limits import memory_budget; "
    "open(sys.argv[1], 'w').write(json.dumps(memory_budget()))"
)


def _memory_cap_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("memory_cap", ROOT / "benchmarks/memory_cap.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_memory_budget_is_the_cap_a_container_or_ulimit_sets(tmp_path: Path) -> None:
    """Under a real cap — a memory cgroup where this machine lets us make one (as Docker,
    Kubernetes and Slurm set it), else a data-size limit — the budget is below the cap
    and its words name it."""
    out = tmp_path / "budget.json"
    limit = 3 << 29  # 1.5 GiB
    cmd = [sys.executable, "-c", _BUDGET, str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = _memory_cap_module().run_capped(cmd, limit, env=env)
    assert result["rc"] == 0, result
    budget, words = json.loads(out.read_text())
    assert 0 < budget < limit
    expected = "a memory cgroup limit" if result["method"].startswith("cgroup") else "a data-size"
    assert words.startswith(expected) and "1.5 GiB" in words, (result, words)


def test_the_memory_budget_under_a_data_size_limit(tmp_path: Path) -> None:
    out = tmp_path / "budget.json"
    limit = 1 << 30
    proc = run_with_data_limit(
        [sys.executable, "-c", _BUDGET, str(out)], {**os.environ, "PYTHONPATH": str(ROOT)}, limit
    )
    assert proc.returncode == 0, proc.stderr
    budget, words = json.loads(out.read_text())
    assert 0 < budget < limit and words == "a data-size limit of 1.0 GiB"


def _rss_file() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssFile:"):
            return int(line.split()[1]) << 10
    raise AssertionError("no RssFile in /proc/self/status")


def test_a_spilled_column_read_through_once_is_not_kept_resident(tmp_path: Path) -> None:
    spill = Spill(tmp_path)
    spill.add("args_blob", np.full(32 << 20, ord("x"), np.uint8))
    blob = spill.array("args_blob", np.uint8).data
    spill.close()
    before = _rss_file()
    assert bytes(blob[::4096]).count(b"x") == (32 << 20) // 4096  # every page touched
    touched = _rss_file()
    drop_resident_pages(blob)
    assert touched - before > 24 << 20  # the pages were resident, then let go of
    assert _rss_file() - before < 4 << 20
    assert bytes(blob[-3:]) == b"xxx"  # and still readable (from the page cache)
