"""Fixtures shared by every test package.

``shared_traces`` is the folder of real traces captured by others on NVIDIA, AMD and MTIA
hardware (``../shared/traces`` from the project root). A user's clone does not have it:
tests that need it skip with a reason that says so.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = ROOT.parent / "shared" / "traces"
SAMPLE_TRACES = ROOT / "sample_traces"


def run_with_data_limit(
    cmd: list[str], env: dict[str, str], limit: int | None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` from the project root, its output captured as text, with its private
    memory capped at ``limit`` bytes (``RLIMIT_DATA``: unprivileged, on every Linux machine;
    no cap when None)."""

    def cap() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))

    return subprocess.run(
        cmd,
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        preexec_fn=cap,
        timeout=timeout,
    )


def run_script(code: str, *args: object, env: dict[str, str], timeout: float = 300) -> str:
    """What ``python -c code args...`` prints, run in a fresh interpreter with ``env`` (it
    must succeed: a failure raises with its output)."""
    return subprocess.run(
        [sys.executable, "-c", code, *(str(a) for a in args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    ).stdout


def shared_trace_files() -> list[Path]:
    """Every timeline trace in ../shared/traces (the Execution Trace excluded), or []."""
    if not SHARED_TRACES.is_dir():
        return []
    return sorted(
        p
        for p in SHARED_TRACES.iterdir()
        if p.name.endswith((".json", ".json.gz")) and not p.name.endswith("_et.json.gz")
    )


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep the trace cache of a test run out of the user's home directory."""
    os.environ["EXPLORER_CACHE_DIR"] = str(tmp_path_factory.mktemp("explorer-cache"))
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.skip("../shared/traces is absent (it is not part of a user's clone)")
    return SHARED_TRACES


@pytest.fixture(scope="session")
def sample_traces() -> Path:
    return SAMPLE_TRACES
