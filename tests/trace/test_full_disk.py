"""A disk that fills up under a load: the load still gives the trace (or one clear line),
never a traceback, and leaves no files behind.

The disk is made "full" for real with ``RLIMIT_FSIZE`` (no file of the process may grow
past the limit: writes fail with ``EFBIG``, as on a full disk they fail with ``ENOSPC``;
Python ignores ``SIGXFSZ``), in a child process so nothing else is limited."""

from __future__ import annotations

import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, SAMPLE_TRACES

#: Bytes a file may grow to: below the sample trace's args (~2.3 MB) and store files.
_FILE_LIMIT = 256 << 10

_LOAD = r"""
import hashlib, json, sys
import explorer
from explorer.store.tables import args_table

def digest(trace):
    h = hashlib.sha256()
    for name in ("slices", "tracks", "flows", "counters", "instants", "memory"):
        h.update(getattr(trace, name).to_csv().encode())
    h.update(args_table(trace.args_store, len(trace.slices)).column("json").to_string().encode())
    return h.hexdigest()

first = explorer.load(sys.argv[1]).data  # a first load, which writes the cache
free = explorer.load(sys.argv[1], use_cache=False).data  # writes nothing
print(json.dumps({
    "same": digest(first) == digest(free),
    "slices": len(first.slices),
    "warnings": first.metadata.get("warnings", []),
}))
"""


def _run(cmd: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    def limit_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (_FILE_LIMIT, _FILE_LIMIT))

    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    full_env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PYTHONDONTWRITEBYTECODE": "1",
        "EXPLORER_CACHE_DIR": str(tmp_path / "cache"),
        "TMPDIR": str(tmp),
        **env,
    }
    return subprocess.run(
        cmd,
        env=full_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        preexec_fn=limit_files,
        timeout=300,
    )


def _left_behind(tmp_path: Path) -> list[Path]:
    """Files and directories the load left in the cache and temporary directories."""
    return [
        p for d in ("cache", "tmp") if (tmp_path / d).exists() for p in (tmp_path / d).iterdir()
    ]


@pytest.fixture(params=["gzipped", "plain"])
def trace(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """The largest sample trace, as shipped (read as a stream) and as plain JSON (read by
    byte ranges): a load starts again from the start of either."""
    source = SAMPLE_TRACES / "cpu_transformer.pt.trace.json.gz"
    if request.param == "gzipped":
        return Path(shutil.copy(source, tmp_path / source.name))
    plain = tmp_path / "cpu_transformer.pt.trace.json"
    with gzip.open(source, "rb") as src, open(plain, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return plain


def test_a_full_cache_disk_still_loads_the_trace_and_says_it_is_not_cached(
    trace: Path, tmp_path: Path
) -> None:
    """A first load puts the slices' args beside the cache while it reads; when that disk
    fills up it reads the file again with them in memory, gives exactly the tables of a
    load that writes nothing, and says in a warning why the trace is not cached."""
    out = _run([sys.executable, "-c", _LOAD, str(trace)], tmp_path)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["same"] and got["slices"] == 17970
    not_cached = [w for w in got["warnings"] if w.startswith("not cached")]
    assert len(not_cached) == 1 and "File too large" in not_cached[0], got["warnings"]
    assert "EXPLORER_CACHE_DIR" in not_cached[0]
    assert _left_behind(tmp_path) == []


def test_columns_that_must_leave_memory_with_no_disk_to_go_to_are_one_line(
    trace: Path, tmp_path: Path
) -> None:
    """A load that keeps every column on disk (as one too large for memory does; forced
    here) tries the cache's directory, then the temporary directory; with both full the
    verb fails in one line that says what and where, and nothing is left behind."""
    out = _run(
        [sys.executable, "-m", "explorer", "info", str(trace)],
        tmp_path,
        EXPLORER_LOAD_SPILL="always",
    )
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith(f"explorer: error: {trace}: keeping its columns on disk")
    assert f"({tmp_path / 'tmp'}: File too large)" in lines[0], lines[0]
    assert "TMPDIR" in lines[0]
    assert _left_behind(tmp_path) == []


def test_a_report_on_a_full_cache_disk_still_reports_and_says_it_is_not_cached(
    trace: Path, tmp_path: Path
) -> None:
    """A first report writes the cache entry while its analyses run: when the disk is
    full, the report is still complete, its warnings say once why the trace is not cached
    (on stderr, and in the document), and nothing is left behind."""
    out = _run(
        [sys.executable, "-m", "explorer", "report", str(trace), "--format", "json"], tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    doc = json.loads(out.stdout)
    assert doc["steps"] and doc["critical_path"]["slices"]
    said = [line for line in out.stderr.splitlines() if "not cached" in line]
    assert len(said) == 1 and said[0].startswith("explorer: warning: not cached"), out.stderr
    assert "File too large" in said[0]
    in_doc = [w for w in doc["trace"]["warnings"] if w.startswith("not cached")]
    assert len(in_doc) == 1 and "File too large" in in_doc[0]
    assert _left_behind(tmp_path) == []
