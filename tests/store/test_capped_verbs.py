"""``info``, ``sql`` and ``export`` on a reopened store entry, each in a real process whose
private memory is capped (``RLIMIT_DATA``: unprivileged, on every Linux machine), give the
same output as without a cap.

The trace is a real CPU trace of the collector repeated to 300k events (233k slices, 79 MB
of JSON, 35 MB of args). Each cap leaves room over what the verb needs now (measured on
this trace by bisection, 2 cores, Python 3.11; "before" is the code before the store's args
were batched and mapped and its tables opened as views of the mapped files, with Arrow's
default allocator, which reserved ~1 GB of address space under any rlimit; since then an
rlimited process uses the system allocator, and the old code needs 253 / 371 / 363 MiB):

=========================================  ==========  =========  ==========
verb                                        before       now        cap here
=========================================  ==========  =========  ==========
info                                        339 MiB     174 MiB    300 MiB
sql (GROUP BY over slices)                  473 MiB     331 MiB    400 MiB
export Chrome JSON, --no-results            583 MiB     402 MiB    490 MiB
=========================================  ==========  =========  ==========

File mappings are not private memory, so the mapped entry costs nothing under this cap:
what is measured is what each verb copies or computes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, SAMPLE_TRACES, run_with_data_limit

sys.path.insert(0, str(ROOT / "benchmarks"))
from big_trace import make_big_trace  # noqa: E402

BASE = SAMPLE_TRACES / "cpu_transformer.pt.trace.json.gz"
MIB = 1 << 20
SQL = "SELECT kind, count(*) AS n, sum(dur) AS total_ns FROM slices GROUP BY kind ORDER BY kind"


@pytest.fixture(scope="module")
def cached(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The repeated trace and an environment whose cache holds its entry (made uncapped)."""
    d = tmp_path_factory.mktemp("capped")
    trace = make_big_trace(d / "t300k.json", 300_000, base=BASE)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EXPLORER_CACHE_DIR": str(d / "cache")}
    _explorer(["info", str(trace)], env)  # writes the cache entry
    return trace, env


def _explorer(
    args: list[str], env: dict[str, str], cap_mib: int | None = None
) -> subprocess.CompletedProcess[str]:
    limit = cap_mib * MIB if cap_mib is not None else None
    done = run_with_data_limit([sys.executable, "-m", "explorer", *args], env, limit)
    assert done.returncode == 0, (args, cap_mib, done.stderr[-2000:])
    return done


def test_info_under_a_cap(cached: tuple[Path, dict[str, str]]) -> None:
    trace, env = cached
    capped = json.loads(_explorer(["info", str(trace), "--json"], env, cap_mib=300).stdout)
    free = json.loads(_explorer(["info", str(trace), "--json"], env).stdout)
    assert capped == free
    # 300k events of a real CPU trace: most are slices, each copy has its ProfilerSteps
    assert 200_000 < capped["slices"] <= 300_000 and len(capped["steps"]) >= 2


def test_sql_under_a_cap_reads_the_entry_in_place(cached: tuple[Path, dict[str, str]]) -> None:
    trace, env = cached
    capped = _explorer(["sql", str(trace), SQL, "-f", "json"], env, cap_mib=400).stdout
    free = _explorer(["sql", str(trace), SQL, "-f", "json"], env).stdout
    assert capped == free
    # DuckDB over the entry's files against pandas over the loaded model (info's counts)
    info = json.loads(_explorer(["info", str(trace), "--json"], env).stdout)
    assert {r["kind"]: r["n"] for r in json.loads(capped)} == info["by_kind"]


def test_export_under_a_cap_writes_every_slice_and_its_args(
    cached: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    trace, env = cached
    out = {}
    for name, cap in (("capped", 490), ("free", None)):
        out[name] = tmp_path / f"{name}.json"
        args = ["export", str(trace), "-o", str(out[name]), "--no-results"]
        _explorer(args, env, cap_mib=cap)
    assert out["capped"].read_bytes() == out["free"].read_bytes()
    events = json.loads(out["capped"].read_bytes())["traceEvents"]
    slices = [e for e in events if e.get("ph") == "X"]
    info = json.loads(_explorer(["info", str(trace), "--json"], env).stdout)
    assert len(slices) == info["slices"]
    # the args in the export are the trace file's, read batch by batch from the entry
    source = json.loads(trace.read_bytes())["traceEvents"]
    want = sorted(
        json.dumps(e["args"], sort_keys=True)
        for e in source
        if e.get("ph") == "X" and e.get("args")
    )
    got = sorted(json.dumps(e["args"], sort_keys=True) for e in slices if e.get("args"))
    assert got == want
