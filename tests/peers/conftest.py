"""Session caches for the differential tests: each peer and Explorer read each trace once.

The traces are every Kineto trace in ``sample_traces/`` and in ``../shared/traces/`` (its
``tracelens/`` folder included). Tests over shared traces are parametrized by file name and
request the ``shared_traces`` fixture, so without ``../shared`` they skip with its reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import explorer
from explorer.trace_api import Trace
from tests.conftest import SAMPLE_TRACES, SHARED_TRACES
from tests.peers.peers import HtaResult, TbResult, run_hta, run_tb


def peer_trace_paths() -> list[Path]:
    """Every single-rank Kineto trace the differential tests run on."""
    out = sorted(SAMPLE_TRACES.glob("*.pt.trace.json.gz"))
    out += sorted(SAMPLE_TRACES.glob("ddp_*/rank0.pt.trace.json.gz"))
    if SHARED_TRACES.is_dir():
        out += sorted(
            p
            for p in SHARED_TRACES.iterdir()
            if p.name.endswith((".json", ".json.gz")) and not p.name.endswith("_et.json.gz")
        )
        out += sorted((SHARED_TRACES / "tracelens").glob("*.json.gz"))
    return out


def trace_id(path: Path) -> str:
    """A test id: the file name (with its sample job's folder for a rank file)."""
    if path.parent.name.startswith("ddp_"):
        return f"{path.parent.name}/{path.name}"
    return path.name


def trace_params(paths: list[Path] | None = None) -> list:
    """``pytest.param(path)`` per trace, with the file name as its id; shared ones are
    marked so the test requests ``shared_traces`` (see :func:`needs_shared`)."""
    return [pytest.param(p, id=trace_id(p)) for p in (paths or peer_trace_paths())]


def is_shared(path: Path) -> bool:
    return SHARED_TRACES in path.parents


@pytest.fixture
def trace_path(request: pytest.FixtureRequest) -> Path:
    """The parametrized trace; a shared one skips cleanly when ``../shared`` is absent."""
    path: Path = request.param
    if is_shared(path):
        request.getfixturevalue("shared_traces")
    return path


class Cache:
    def __init__(self) -> None:
        self.hta: dict[Path, HtaResult] = {}
        self.tb: dict[Path, TbResult] = {}
        self.explorer: dict[Path, Trace] = {}

    def hta_of(self, path: Path) -> HtaResult:
        if path not in self.hta:
            self.hta[path] = run_hta(path)
        return self.hta[path]

    def tb_of(self, path: Path) -> TbResult:
        if path not in self.tb:
            self.tb[path] = run_tb(path)
        return self.tb[path]

    def explorer_of(self, path: Path) -> Trace:
        if path not in self.explorer:
            self.explorer[path] = explorer.load(path)
        return self.explorer[path]


@pytest.fixture(scope="session")
def peers() -> Cache:
    """Peer and Explorer results, computed once per trace per test session."""
    return Cache()
