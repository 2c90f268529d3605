"""Under a memory limit the panels' analyses certainly cannot fit in, the window's
analysis runner runs none of them and each says why in one line (the timeline stays
usable); without a limit every one of them runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from explorer.analysis.memory_need import LEAST_BYTES_PER_SLICE
from explorer.scenarios.large import write_large
from explorer.ui.loader import ANALYSES
from tests.conftest import ROOT, run_script

_RUN = r"""
import json, resource, sys
import explorer
from explorer.trace.memory_limits import held_bytes
from explorer.ui.loader import run_analyses_now
t = explorer.load(sys.argv[1])
room = int(sys.argv[2])
if room:
    resource.setrlimit(resource.RLIMIT_DATA, (held_bytes() + room, resource.RLIM_INFINITY))
results, errors = run_analyses_now(t)
print(json.dumps({"results": sorted(results), "errors": errors}))
"""


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    d = tmp_path_factory.mktemp("panels")
    trace = write_large(d / "big.json", 400_000)  # 215,811 slices
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "EXPLORER_CACHE_DIR": str(d / "cache"),
        "QT_QPA_PLATFORM": "offscreen",
    }
    return trace, env


def _analyses(big: tuple[Path, dict[str, str]], room: int) -> dict:
    trace, env = big
    return json.loads(run_script(_RUN, trace, room, env=env).strip().splitlines()[-1])


def test_panels_analyses_are_refused_under_a_limit_they_cannot_fit(
    big: tuple[Path, dict[str, str]],
) -> None:
    out = _analyses(big, 60 << 20)  # 215,811 slices need at least 144 MiB
    assert out["results"] == []
    assert sorted(out["errors"]) == sorted(name for name, _ in ANALYSES)
    for message in out["errors"].values():
        assert "215,811 slices need at least" in message
        assert message.endswith("the panels stay empty") and "\n" not in message


def test_panels_analyses_all_run_without_a_limit(big: tuple[Path, dict[str, str]]) -> None:
    out = _analyses(big, 0)
    assert out["errors"] == {}
    assert out["results"] == sorted(name for name, _ in ANALYSES)


_LANES = r"""
import resource, sys
import explorer
from explorer.errors import ExplorerError
from explorer.trace.memory_limits import held_bytes
from explorer.ui.timeline.lane_builder import open_or_build
t = explorer.load(sys.argv[1])
resource.setrlimit(resource.RLIMIT_DATA, (held_bytes() + int(sys.argv[2]), resource.RLIM_INFINITY))
try:
    lanes, how = open_or_build(t.data.slices, None)
    print("built", how)
except ExplorerError as exc:
    print(exc)
"""


@pytest.mark.parametrize(("room_mb", "built"), [(30, False), (3072, True)])
def test_the_lane_index_is_refused_in_one_line_where_it_cannot_fit(
    big: tuple[Path, dict[str, str]], room_mb: int, built: bool
) -> None:
    """The timeline's lane index needs at least 40 B a slice, and 250 more for each slice of
    the group of tracks indexed at a time (all 215,811 slices here: 63 MB): with 30 MB to
    spare the builder says so in the line the timeline shows; with 3 GB it builds."""
    trace, env = big
    line = run_script(_LANES, trace, room_mb << 20, env=env).strip()
    if built:
        assert line == "built built"
    else:
        assert "the timeline's lane index over 215,811 slices need at least" in line
        assert "a data-size limit" in line and "\n" not in line


_PANEL = r"""
import resource, sys
resource.setrlimit(resource.RLIMIT_DATA, (1 << 40, 1 << 40))  # Arrow: the system allocator
from PyQt6.QtCore import QEventLoop, QTimer
from PyQt6.QtWidgets import QApplication
import explorer
from explorer.trace.memory_limits import _statm, held_bytes
from explorer.ui.panels.operators import OperatorsPanel
app = QApplication([])
t = explorer.load(sys.argv[1])
if sys.argv[2] == "capped":  # room for a thread to start, not for the aggregation
    soft = _statm()[1] + (24 << 20)
    resource.setrlimit(resource.RLIMIT_DATA, (soft, 1 << 40))
    print(soft - held_bytes())
panel = OperatorsPanel()
loop = QEventLoop()
panel.updated.connect(loop.quit)
QTimer.singleShot(120_000, loop.quit)
panel.set_trace(t)
loop.exec()
print(panel.status.text().replace("\n", " "))
print(panel.model.rowCount())
"""


@pytest.fixture(scope="module")
def bigger(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], int]:
    """A trace whose analyses need more than a Qt window holds over what it uses (~150 MB
    of reserved, unused data), so that a limit can leave a thread room to start and the
    aggregation none."""
    d = tmp_path_factory.mktemp("panel")
    trace = write_large(d / "bigger.json", 1_200_000)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "EXPLORER_CACHE_DIR": str(d / "cache"),
        "QT_QPA_PLATFORM": "offscreen",
    }
    info = subprocess.run(
        [sys.executable, "-m", "explorer", "info", "--json", str(trace)],
        env=env, capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    return trace, env, int(json.loads(info.stdout)["slices"])


@pytest.mark.parametrize("capped", [True, False])
def test_a_panels_own_aggregation_is_refused_under_a_limit_it_cannot_fit(
    bigger: tuple[Path, dict[str, str], int], capped: bool
) -> None:
    """The Operators panel aggregates every slice itself (not through the window's
    analyses): under a limit it cannot fit in, it says why in its status line, in one line,
    and the window lives; without a limit it fills its table."""
    trace, env, slices = bigger
    out = run_script(_PANEL, trace, "capped" if capped else "free", env=env)
    *room, status, rows = out.strip().splitlines()
    if capped:
        assert int(room[-1]) < slices * LEAST_BYTES_PER_SLICE  # the limit bites
        assert status.startswith("Could not aggregate operators: ")
        assert f"{slices:,} slices need at least" in status and "a data-size limit" in status
        assert "ExplorerError" not in status and int(rows) == 0
    else:
        assert not status.startswith("Could not") and int(rows) > 10
