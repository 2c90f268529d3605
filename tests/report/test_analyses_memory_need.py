"""Under a hard memory limit that the whole-trace analyses cannot fit in, ``report`` and
``export`` (with its results) say so at once in one line, naming what works within it;
under a limit they fit in, nothing is refused and the output is the uncapped one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from explorer.analysis.memory_need import LEAST_BYTES_PER_SLICE
from explorer.scenarios.large import write_large
from tests.conftest import ROOT, run_script, run_with_data_limit

#: Memory held (resident, not shared) once the trace is open: what the check counts.
_HELD = (
    "import sys, explorer; from explorer.trace.memory_limits import held_bytes; "
    "t = explorer.load(sys.argv[1]); print(held_bytes())"
)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], int]:
    d = tmp_path_factory.mktemp("need")
    trace = write_large(d / "big.json", 400_000)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EXPLORER_CACHE_DIR": str(d / "cache")}
    stored = subprocess.run(
        [sys.executable, "-m", "explorer", "info", "--json", str(trace)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert stored.returncode == 0, stored.stderr
    slices = json.loads(stored.stdout)["slices"]
    assert slices == 215_811  # what the tests below size their limits for
    held = run_script(_HELD, trace, env=env)
    return trace, env, int(held) + LEAST_BYTES_PER_SLICE * slices


def _run(args: list[str], env: dict[str, str], limit: int | None) -> subprocess.CompletedProcess:
    return run_with_data_limit([sys.executable, "-m", "explorer", *args], env, limit)


#: Opens the trace, then sets a data-size limit (the memory a process may hold) that leaves
#: ``argv[2]`` bytes over what it holds, and asks whether the report's analyses fit.
_CHECK = r"""
import resource, sys
import explorer
from explorer.analysis.memory_need import check_analyses_fit
from explorer.errors import ExplorerError
from explorer.trace.memory_limits import held_bytes
t = explorer.load(sys.argv[1])
limit = held_bytes() + int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_DATA, (limit, resource.RLIM_INFINITY))
try:
    check_analyses_fit(t.data, "the report's analyses", "info, sql")
    print("fits")
except ExplorerError as exc:
    print(exc)
"""


@pytest.mark.parametrize("room_mb", [30, 60])
def test_analyses_that_cannot_fit_under_a_limit_are_refused_in_one_line(
    big: tuple[Path, dict[str, str], int], room_mb: int
) -> None:
    trace, env, _ = big
    line = run_script(_CHECK, trace, room_mb << 20, env=env).strip()
    slices = 215_811  # the scenario's 400,000 events (asserted by the fixture's info)
    assert slices * LEAST_BYTES_PER_SLICE > room_mb << 20  # both rooms are too small
    assert line.startswith(str(trace)) and f"over {slices:,} slices need at least" in line
    assert "a data-size limit" in line and line.endswith("info, sql")


def test_analyses_that_fit_under_a_limit_are_not_refused(
    big: tuple[Path, dict[str, str], int],
) -> None:
    trace, env, _ = big
    room = 215_811 * LEAST_BYTES_PER_SLICE + (16 << 20)
    assert run_script(_CHECK, trace, room, env=env).strip() == "fits"


def test_a_limit_the_analyses_fit_in_refuses_nothing(
    big: tuple[Path, dict[str, str], int],
) -> None:
    trace, env, floor = big
    free = _run(["report", "--format", "json", str(trace)], env, None)
    assert free.returncode == 0, free.stderr
    capped = _run(["report", "--format", "json", str(trace)], env, floor + (3 << 30))
    assert capped.returncode == 0, capped.stderr
    keep = ("steps", "breakdown", "findings")
    a, b = json.loads(free.stdout), json.loads(capped.stdout)
    assert {k: a[k] for k in keep if k in a} == {k: b[k] for k in keep if k in b}
    assert any(k in a for k in keep)
