"""Fixtures shared by every test package, and the suite's markers.

Markers (declared in ``pyproject.toml``; ``pytest -m "not slow"`` is the inner loop):

* ``gui``: every test under ``tests/ui/`` (it drives the Qt viewer).
* ``subprocess``: a test that starts another process, found in its module's source (see
  :func:`_spawning`): it calls ``subprocess``/``multiprocessing``, ``run_script``,
  ``run_with_data_limit`` or names ``sys.executable``, directly, through a function of its
  module, or through a fixture of its module that does.
* ``slow``: every test that starts a process, every test in the folders whose tests are
  real captures, whole jobs, peers' analyses or the fuzz corpus (:data:`SLOW_DIRS`), and
  tests marked ``@pytest.mark.slow`` where they are defined (seconds of CPU each).

``shared_traces`` is the folder of real traces captured by others on NVIDIA, AMD and MTIA
hardware (``../shared/traces`` from the project root). A user's clone does not have it:
tests that need it skip with a reason that says so.
"""

from __future__ import annotations

import ast
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = ROOT.parent / "shared" / "traces"
SAMPLE_TRACES = ROOT / "sample_traces"

#: Test folders whose every test is slow: real torch captures (``collect``, ``backends``),
#: multi-process jobs (``job``), the peers' own analyses of every trace (``peers``), hostile
#: inputs run through every verb (``fuzz``).
SLOW_DIRS = ("collect", "backends", "job", "peers", "fuzz")

#: What starts a process: a call of these names, or of these modules' attributes.
SPAWN_CALLS = {"run_script", "run_with_data_limit", "Popen"}
SPAWN_MODULES = {"subprocess", "multiprocessing", "mp"}


def _spawning(path: Path) -> set[str]:
    """The names of the module's functions (tests, helpers, fixtures) that start a process,
    directly or through another function of the module."""
    tree = ast.parse(path.read_text())
    calls: dict[str, set[str]] = {}
    direct: set[str] = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        names = calls.setdefault(fn.name, set())
        for node in ast.walk(fn):
            if isinstance(node, ast.Name):
                names.add(node.id)  # a call, or a fixture or helper passed along
                if node.id in SPAWN_CALLS:
                    direct.add(fn.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id in SPAWN_MODULES or (
                    node.value.id == "sys" and node.attr == "executable"
                ):
                    direct.add(fn.name)
            elif isinstance(node, ast.arg):
                names.add(node.arg)  # a fixture the function requests
    spawning = set(direct)
    while True:
        more = {f for f, used in calls.items() if f not in spawning and used & spawning}
        if not more:
            return spawning
        spawning |= more


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under ``-m "not slow"`` the slow folders are not even imported (their modules import
    torch, the peers and the job engine: seconds of the inner loop before any test runs)."""
    if config.option.markexpr.strip() != "not slow":
        return None
    parts = collection_path.relative_to(ROOT).parts if ROOT in collection_path.parents else ()
    return True if len(parts) >= 2 and parts[0] == "tests" and parts[1] in SLOW_DIRS else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Under pytest-xdist (``-n 2 --dist loadgroup``) a module's tests run in one worker, so
    # its module- and session-scoped fixtures (a capture, a loaded trace) are made once; the
    # peers' tests share one worker too (each peer reads each trace once a session).
    grouped = config.pluginmanager.hasplugin("xdist")
    spawning: dict[Path, set[str]] = {}
    for item in items:
        path = Path(item.path)
        parts = path.relative_to(ROOT).parts
        if path not in spawning:
            spawning[path] = _spawning(path)
        fn = getattr(item, "originalname", item.name)
        if fn in spawning[path] or spawning[path] & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.subprocess)
        if parts[1:2] == ("ui",):
            item.add_marker(pytest.mark.gui)
        if (len(parts) > 2 and parts[1] in SLOW_DIRS) or item.get_closest_marker("subprocess"):
            item.add_marker(pytest.mark.slow)
        if grouped:
            group = "peers" if parts[1] == "peers" else "/".join(parts)
            item.add_marker(pytest.mark.xdist_group(group))


def ctrl_c_reaches() -> None:
    """A ``preexec_fn`` for a process a test sends Ctrl-C: SIGINT back to its default, as a
    shell starts a job in a terminal. A harness started in the background without job
    control (``cmd &`` in a script, ``nohup``) runs with SIGINT ignored, every process it
    starts inherits that, and Python then keeps ignoring it: the Ctrl-C never lands."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


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
