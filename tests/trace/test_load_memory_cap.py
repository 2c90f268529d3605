"""A trace that does not fit in the memory a process may use ends the CLI with one line
naming the file and the limit, and exit status 2 — not a traceback (a MemoryError can come
from numpy, msgspec or Arrow, in the loading process or a decoding worker)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from explorer.scenarios.large import write_large
from tests.conftest import ROOT, run_with_data_limit

#: The interpreter with what a verb that loads a trace imports (``import explorer`` alone
#: imports neither numpy nor pandas: a report read back from the store needs neither).
_VM_AFTER_IMPORT = (
    "import explorer.cli.main, explorer.readers, explorer.trace_api, psutil; "
    "print(psutil.Process().memory_info().data)"
)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_trace_beyond_an_address_space_limit_is_one_line(tmp_path: Path, workers: str) -> None:
    trace = write_large(tmp_path / "big.json", 400_000)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "EXPLORER_CACHE_DIR": str(tmp_path / "cache"),
        "EXPLORER_LOAD_WORKERS": workers,
    }
    imported = subprocess.run(
        [sys.executable, "-c", _VM_AFTER_IMPORT], env=env, capture_output=True, check=True
    )
    # room for the interpreter with Explorer imported and 64 MiB more: far less than the
    # trace's events need (its JSON alone is larger)
    limit = int(imported.stdout) + (64 << 20)
    assert trace.stat().st_size > 64 << 20
    proc = run_with_data_limit([sys.executable, "-m", "explorer", "info", str(trace)], env, limit)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert str(trace) in lines[0] and "does not fit in the memory" in lines[0]
    assert f"{limit / 2**30:.1f} GiB" in lines[0]
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_every_verb_step_out_of_memory_is_one_line(tmp_path: Path) -> None:
    """With the trace already in the store, whatever runs out of memory first under a
    tight cap — opening the entry or the verb's own work — says so in one line. (Not
    ``sql``: under an address-space cap DuckDB's new threads can fail in the C library,
    which aborts the process before Python sees an error.)"""
    trace = write_large(tmp_path / "big.json", 200_000)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EXPLORER_CACHE_DIR": str(tmp_path / "cache")}
    stored = subprocess.run(
        [sys.executable, "-m", "explorer", "info", str(trace)], env=env, cwd=ROOT, timeout=300
    )
    assert stored.returncode == 0
    imported = subprocess.run(
        [sys.executable, "-c", _VM_AFTER_IMPORT], env=env, capture_output=True, check=True
    )
    outcomes = set()
    for extra_mb in (8, 48, 120):
        limit = int(imported.stdout) + (extra_mb << 20)
        for verb in (["info", str(trace)], ["report", str(trace)]):
            proc = run_with_data_limit([sys.executable, "-m", "explorer", *verb], env, limit)
            lines = proc.stderr.strip().splitlines()
            if proc.returncode == 0:
                outcomes.add("ran")
                continue
            if proc.returncode == -signal.SIGABRT and "std::bad_alloc" in proc.stderr:
                # a native (C++) library failed an allocation and aborted the
                # process before Python could see it: a known limit, left open on issue #14
                outcomes.add("native abort")
                continue
            # exit 2, no traceback, and the last line says what ran out (under a cap Python
            # can also print an unraisable "SystemError: ... exported buffers" line while
            # unwinding; seen once in CI, left open on issue #14)
            assert proc.returncode == 2 and "Traceback" not in proc.stderr, (verb, proc.stderr)
            assert "memory" in lines[-1].lower() and len(lines) <= 2, proc.stderr
            outcomes.add("one line")
    assert "one line" in outcomes  # the cap did bite in Python somewhere
