"""Under a memory limit the panels' analyses certainly cannot fit in, the window's
analysis runner runs none of them and each says why in one line (the timeline stays
usable); under one with room for some steps, they cover those steps and say so, naming
the whole trace's slices; without a limit every one of them runs."""

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
from explorer.analysis.attribution import slice_sources
from explorer.analysis.memory_need import LEAST_BYTES_PER_SLICE
from explorer.scenarios.large import write_large
from explorer.trace_api import Trace
from explorer.ui.loader import ANALYSES, WINDOW
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


#: Before anything imports Arrow: a limit set now makes it take the system allocator
#: (its own reserves 1 GB at first use); the scripts lower the limit later.
_ARROW_SYSTEM_ALLOCATOR = r"""
import json, resource, sys
resource.setrlimit(resource.RLIMIT_DATA, (1 << 40, 1 << 40))  # Arrow: the system allocator
"""


_PANEL = (
    _ARROW_SYSTEM_ALLOCATOR
    + r"""
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
)


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


# -- a limit with room for some steps, not the whole trace ---------------------------------------

#: RLIMIT_DATA over what the process has mapped after the load: the critical path's solver
#: start and the measured need of half the trace's slices, so that about half its steps fit.
_HALF_ROOM = r"""
import resource
from explorer.analysis.critical_path import SCIPY_INIT_BYTES
from explorer.analysis.memory_need import MEASURED_BYTES_PER_SLICE
from explorer.trace.memory_limits import _statm
def limit_to_half(n):
    soft = _statm()[1] + SCIPY_INIT_BYTES + n * MEASURED_BYTES_PER_SLICE // 2
    resource.setrlimit(resource.RLIMIT_DATA, (soft, 1 << 40))
"""

_WINDOWED = (
    _ARROW_SYSTEM_ALLOCATOR
    + r"""
import explorer
from explorer.ui.loader import WINDOW, run_analyses_now
"""
    + _HALF_ROOM
    + r"""
t = explorer.load(sys.argv[1])
limit_to_half(len(t.slices))
results, errors = run_analyses_now(t)
a = results[WINDOW]
w, ws = a.window, a.trace.slices

def seen(whole_ids):
    # What the window itself holds at those whole-trace ids (its own rows), for the parent
    # to compare with the whole trace it loads without a limit.
    rows = w.rows_of(whole_ids)
    return {"ids": [int(i) for i in whole_ids], "rows": rows.tolist(),
            "name": ws["name"].astype(str).to_numpy()[rows].tolist(),
            "ts": ws["ts"].to_numpy()[rows].tolist(), "dur": ws["dur"].to_numpy()[rows].tolist()}

graph = results["dependency_graph"]
sources = results["slice_sources"]
known = sources[sources["file"] != ""]
print(json.dumps({
    "names": list(results), "errors": errors, "note": a.note,
    "start_ns": w.start_ns, "end_ns": w.end_ns, "window_slices": len(ws),
    "breakdown": results["breakdown"].to_dict("list"),
    "steps": results["steps"].to_dict("list"),
    "evidence": [seen(f.evidence) for f in results["findings"]],
    "nodes": seen(graph.nodes[:: max(len(graph.nodes) // 500, 1)]),
    "edges": [graph.edges["src"].tolist()[:500], graph.edges["dst"].tolist()[:500]],
    "sources": {"ids": known.index.tolist()[::50], "file": known["file"].tolist()[::50],
                "line": known["line"].tolist()[::50]},
}))
"""
)


@pytest.fixture(scope="module")
def stalled(big: tuple[Path, dict[str, str]]) -> Path:
    """A large trace with findings in every step (input, sync and copy stalls: 111,543
    slices in 390 steps), beside ``big`` (whose clean steps have none)."""
    return write_large(big[0].parent / "stalled.json", 200_000, scenario="input_sync_pageable")


@pytest.fixture(scope="module")
def windowed(stalled: Path, big: tuple[Path, dict[str, str]]) -> dict:
    """The viewer's analyses of ``stalled`` under a limit with room for about half its steps."""
    return json.loads(run_script(_WINDOWED, stalled, env=big[1]).strip().splitlines()[-1])


@pytest.fixture(scope="module")
def whole(stalled: Path) -> Trace:
    """``stalled`` loaded here, without a limit: the independent reference."""
    return explorer.load(str(stalled), use_cache=False)


def test_under_a_limit_for_some_steps_the_analyses_cover_those_steps(
    windowed: dict, whole: Trace
) -> None:
    """Every analysis runs, over the first steps that fit, and the note says which."""
    assert windowed["errors"] == {}
    assert windowed["names"] == [WINDOW, *(name for name, _ in ANALYSES)]
    numbers = windowed["steps"]["step"]
    first, last, all_steps = numbers[0], numbers[-1], len(whole.steps())
    assert numbers == list(range(first, last + 1)) and first == 0
    # About half the steps (the room was sized for half the slices), certainly not all.
    assert all_steps // 4 < len(numbers) < all_steps * 3 // 4
    note = windowed["note"]
    assert note.startswith(f"Analyses cover steps {first}-{last} of {all_steps:,} only: ")
    assert f"all {len(whole.slices):,} slices" in note and "a data-size limit" in note
    assert "\n" not in note and windowed["window_slices"] < len(whole.slices)


def test_the_windows_step_tables_are_the_whole_traces_in_its_ids(
    windowed: dict, whole: Trace
) -> None:
    """Steps (their slice ids the whole trace's) and the breakdown equal the whole trace's
    own, computed here without a limit, for the steps covered."""
    steps = pd.DataFrame(windowed["steps"])
    ref = whole.steps()
    ref = ref[ref["step"].isin(steps["step"])].reset_index(drop=True)
    pd.testing.assert_frame_equal(steps, ref, check_dtype=False, check_categorical=False)
    names = whole.slices["name"].astype(str).to_numpy()
    assert all(names[i].startswith("ProfilerStep#") for i in steps["slice"])
    keys = ["step", "device", "category"]
    bd = whole.breakdown()
    bd = bd[bd["step"].isin(steps["step"])]
    got, ref_bd = (
        t.astype({"device": str, "category": str}).sort_values(keys).reset_index(drop=True)
        for t in (pd.DataFrame(windowed["breakdown"]), bd)
    )
    assert len(got) == len(steps) * len(set(got["category"])) * len(set(got["device"]))
    pd.testing.assert_frame_equal(got, ref_bd, check_dtype=False)


def _same_slices(seen: dict, whole: Trace, start_ns: int, end_ns: int) -> None:
    """The whole trace's slices at ``seen["ids"]`` are the ones the window held there
    (name and times), and each lies in the window's time range."""
    ids = np.asarray(seen["ids"], np.int64)
    assert ((ids >= 0) & (ids < len(whole.slices))).all() and min(seen["rows"]) >= 0
    s = whole.slices
    assert s["name"].astype(str).to_numpy()[ids].tolist() == seen["name"]
    ts, dur = s["ts"].to_numpy()[ids], s["dur"].to_numpy()[ids]
    assert ts.tolist() == seen["ts"] and dur.tolist() == seen["dur"]
    assert ((ts < end_ns) & (ts + dur >= start_ns)).all()


def test_evidence_graph_and_source_ids_name_the_whole_traces_slices(
    windowed: dict, whole: Trace
) -> None:
    """What a click on a finding's evidence, a graph node or a source line selects on the
    whole-trace timeline is the slice the window's analyses meant, inside its steps."""
    start, end = windowed["start_ns"], windowed["end_ns"]
    assert windowed["evidence"] and sum(len(e["ids"]) for e in windowed["evidence"]) > 0
    for seen in windowed["evidence"]:
        _same_slices(seen, whole, start, end)
    assert len(windowed["nodes"]["ids"]) > 100
    _same_slices(windowed["nodes"], whole, start, end)
    edges = np.asarray(windowed["edges"], np.int64)
    assert ((edges >= 0) & (edges < len(whole.slices))).all()
    src = windowed["sources"]
    ref = slice_sources(whole.data).iloc[src["ids"]]
    assert len(src["ids"]) > 50
    assert ref["file"].tolist() == src["file"] and ref["line"].tolist() == src["line"]


_WINDOW_PANEL = (
    _ARROW_SYSTEM_ALLOCATOR
    + r"""
from PyQt6.QtCore import QEventLoop, QTimer
from PyQt6.QtWidgets import QApplication
import explorer
from explorer.ui.analysed import analysed_trace
from explorer.ui.panels.operators import OperatorsPanel
"""
    + _HALF_ROOM
    + r"""
app = QApplication([])
t = explorer.load(sys.argv[1])
limit_to_half(len(t.slices))
a = analysed_trace(t)
panel = OperatorsPanel()
loop = QEventLoop()
panel.updated.connect(loop.quit)
QTimer.singleShot(120_000, loop.quit)
panel.set_analysed(a)
loop.exec()
stats = panel.stats
kernels = stats[stats["kind"] == "kernel"].head(3)
print(json.dumps({
    "status": panel.status.text(), "scopes": [panel.scope.itemText(i) for i in range(panel.scope.count())],
    "start_ns": a.window.start_ns, "end_ns": a.window.end_ns,
    "kernels": {str(n): [int(c), panel.slice_ids(str(n)).tolist()] for n, c in zip(kernels["name"], kernels["count"])},
}))
"""
)


def test_the_operators_panel_aggregates_the_steps_that_fit(
    stalled: Path, big: tuple[Path, dict[str, str]], whole: Trace
) -> None:
    """Under the same limit the Operators panel fills its table from the window of steps
    (the scope says which), each kernel counted as often as the whole trace has it in that
    window's time, and selecting a row selects those kernels by their whole-trace ids."""
    out = json.loads(run_script(_WINDOW_PANEL, stalled, env=big[1]).strip().splitlines()[-1])
    start, end = out["start_ns"], out["end_ns"]
    label = out["scopes"][0]
    assert label.startswith("Steps 0-") and label.endswith(" (those that fit in memory)")
    assert f"of {len(whole.steps()):,}" in label
    assert len(out["scopes"]) == 1 + int(label.split("-")[1].split()[0]) + 1  # its steps only
    assert out["status"].endswith(label.lower()) and not out["status"].startswith("Could not")
    s = whole.slices
    names, ts, dur = s["name"].astype(str).to_numpy(), s["ts"].to_numpy(), s["dur"].to_numpy()
    assert out["kernels"]
    for name, (count, ids) in out["kernels"].items():
        inside = np.flatnonzero((names == name) & (ts < end) & (ts + dur > start))
        assert count == len(inside) > 0
        assert ids == inside.tolist()


_WINDOW_VIEW = (
    _ARROW_SYSTEM_ALLOCATOR
    + r"""
import numpy as np
from PyQt6.QtCore import QSettings
from PyQt6.QtWidgets import QApplication
import explorer
from explorer.ui.app import wait_idle
from explorer.ui.main_window import MainWindow
"""
    + _HALF_ROOM
    + r"""
app = QApplication([])
settings = QSettings(sys.argv[2], QSettings.Format.IniFormat)
window = MainWindow(settings=settings, restore=False, remember=False)
t = explorer.load(sys.argv[1])
limit_to_half(len(t.slices))
window.set_trace(t)
held = [p.busy() for p in window.panels.values()]
window.analysis.wait()
wait_idle(window, 120)
window.findings.select(0)
print(json.dumps({
    "held_busy": held,
    "note": window.window_note.toolTip() if window.window_note.isVisibleTo(window) else "",
    "short_note": window.window_note.text(),
    "findings_note": window.findings.note.text(),
    "errors": window.analysis_errors,
    "timeline_steps": window.timeline.steps["step"].tolist(),
    "evidence": window.findings.evidence.tolist(),
    "operators": [window.panels["operators"].scope.itemText(0), window.panels["operators"].model.rowCount()],
    "memory": window.panels["memory"].status.text(),
}))
"""
)


def test_the_window_under_the_limit_shows_the_steps_that_fit(
    stalled: Path, big: tuple[Path, dict[str, str]], whole: Trace, tmp_path: Path
) -> None:
    """The whole viewer, under the real limit, with its analysis thread: the note in the
    status bar and above the findings, those steps on the timeline, a finding's evidence in
    whole-trace ids inside them, Operators over them, Memory refusing in one line that
    names them; no panel ran anything before the analyses chose."""
    out = json.loads(
        run_script(_WINDOW_VIEW, stalled, tmp_path / "s.ini", env=big[1]).strip().splitlines()[-1]
    )
    assert out["errors"] == [] and not any(out["held_busy"])
    first, last, all_steps = 0, out["timeline_steps"][-1], len(whole.steps())
    assert out["timeline_steps"] == list(range(first, last + 1)) and last < all_steps - 1
    which = f"steps {first}-{last} of {all_steps:,}"
    assert out["note"] == out["findings_note"] and out["note"].startswith(f"Analyses cover {which}")
    assert out["short_note"] == f"Analyses: {which} (those that fit in memory)"
    assert out["operators"][0] == f"S{which[1:]} (those that fit in memory)"
    assert out["operators"][1] > 5
    assert out["memory"].startswith("Could not read memory: ")
    assert out["memory"].endswith(f"the other analyses cover {which}")
    evidence = np.asarray(out["evidence"], np.int64)
    steps = whole.steps()
    end = int(steps["end_ns"].iat[last])
    assert len(evidence) and (evidence < len(whole.slices)).all()
    assert (whole.slices["ts"].to_numpy()[evidence] < end).all()
