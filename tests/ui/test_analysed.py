"""The viewer over a window of steps (what a memory limit leaves it): every slice id the
analyses hand the views is the whole trace's, checked against the whole trace's own
analyses on real CPU traces; the window, its panels and the Details panel say which steps
they cover. (The limit itself, a real RLIMIT_DATA, is in test_analyses_memory_limit.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import explorer
from explorer.analysis.attribution import slice_sources
from explorer.trace_api import Trace
from explorer.ui.analysed import AnalysedTrace, in_whole_ids
from explorer.ui.loader import ANALYSES, WINDOW
from tests.conftest import SAMPLE_TRACES
from tests.ui.conftest import click_graph_node

#: Real CPU traces with four steps, findings among them; the window is their middle steps.
TRACES = ("cpu_slow_dataloader.pt.trace.json.gz", "neuron_cnn.pt.trace.json.gz")


def _middle(name: str) -> AnalysedTrace:
    whole = explorer.load(str(SAMPLE_TRACES / name), use_cache=False)
    numbers = whole.steps()["step"].to_numpy()
    assert len(numbers) == 4
    return AnalysedTrace(whole, whole.window_of_steps(int(numbers[1]), int(numbers[2])))


@pytest.fixture(scope="module", params=TRACES)
def analysed(request: pytest.FixtureRequest) -> AnalysedTrace:
    return _middle(request.param)


def _results(a: AnalysedTrace) -> dict[str, tuple[Any, Any]]:
    """Each analysis over the window: (its own result, the result in whole-trace ids)."""
    out = {}
    for name, fn in ANALYSES:
        value = fn(a.trace)
        out[name] = (value, in_whole_ids(name, value, a.window))
    return out


def _same_file(a: str, b: str) -> bool:
    """Two spellings of one file. A trace names a file relative to ``sys.path`` in torch's
    frames and absolute in the collector's; the analyses spell it absolute when the trace
    holds both (:func:`explorer.trace.source.user_frames`), so a window whose steps hold
    only the relative one spells it so."""
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def _same(a: AnalysedTrace, window_ids: Any, whole_ids: Any) -> None:
    """The whole trace's slices at ``whole_ids`` are the window's at ``window_ids``."""
    w, s = a.trace.slices, a.whole.slices
    window_ids, whole_ids = np.asarray(window_ids, np.int64), np.asarray(whole_ids, np.int64)
    assert len(window_ids) == len(whole_ids)
    for column in ("name", "ts", "dur", "track"):
        left = w[column].to_numpy()[window_ids]
        right = s[column].to_numpy()[whole_ids]
        assert (left.astype(str) == right.astype(str)).all(), column


def _same_evidence_and_graph(a: AnalysedTrace, results: dict[str, Any]) -> None:
    """Each finding's evidence, and the dependency graph's nodes and edges, name in the
    whole trace the slices the window's own results name."""
    for f, g in zip(*results["findings"], strict=True):
        _same(a, f.evidence, g.evidence)
    graph, whole_graph = results["dependency_graph"]
    assert len(graph.nodes) > 10
    _same(a, graph.nodes, whole_graph.nodes)
    _same(a, graph.edges["src"], whole_graph.edges["src"])
    _same(a, graph.edges["dst"], whole_graph.edges["dst"])


def test_the_window_is_inside_the_trace_and_not_a_prefix(analysed: AnalysedTrace) -> None:
    """The middle steps' ids differ from the whole trace's (a mapping left out would show),
    and the two mappings undo each other."""
    w = analysed.window
    assert w is not None and 0 < len(w.ids) < len(analysed.whole.slices)
    assert (w.ids != np.arange(len(w.ids))).any()
    rows = np.arange(len(w.ids))
    assert (w.rows_of(analysed.whole_ids(rows)) == rows).all()
    outside = np.setdiff1d(np.arange(len(analysed.whole.slices)), w.ids)
    assert len(outside) and (w.rows_of(outside) == -1).all()
    assert analysed.row_of(int(outside[0])) == -1


def test_steps_and_breakdown_are_the_whole_traces_for_those_steps(
    analysed: AnalysedTrace,
) -> None:
    results = _results(analysed)
    steps = results["steps"][1]
    ref = analysed.whole.steps()
    ref = ref[ref["step"].isin(steps["step"])].reset_index(drop=True)
    pd.testing.assert_frame_equal(steps.reset_index(drop=True), ref, check_categorical=False)
    bd = results["breakdown"][1]
    whole_bd = analysed.whole.breakdown()
    whole_bd = whole_bd[whole_bd["step"].isin(steps["step"])].reset_index(drop=True)
    pd.testing.assert_frame_equal(bd.reset_index(drop=True), whole_bd, check_categorical=False)


def test_evidence_graph_and_sources_name_the_whole_traces_slices(
    analysed: AnalysedTrace,
) -> None:
    results = _results(analysed)
    _same_evidence_and_graph(analysed, results)
    # Each slice of the window's steps has the source line the whole trace's attribution
    # gives it (those enclosing the window, cut short, are left out), the file perhaps
    # spelled as the window's steps spell it.
    sources = results["slice_sources"][1]
    w = analysed.window
    assert w is not None
    ts = analysed.trace.slices["ts"].to_numpy()
    dur = analysed.trace.slices["dur"].to_numpy()
    inside = (ts >= w.start_ns) & (ts + dur <= w.end_ns)
    ref = slice_sources(analysed.whole.data).iloc[w.ids[inside]]
    got = sources[inside]
    assert (got.index.to_numpy() == w.ids[inside]).all()
    assert (got["file"] != "").sum() > 10
    files = zip(got["file"].astype(str), ref["file"].astype(str), strict=True)
    assert all(_same_file(f, g) for f, g in files)
    assert got["line"].tolist() == ref["line"].tolist()


def test_a_finding_and_the_note_in_the_window(window: Any, open_trace: Any, qtbot: Any) -> None:
    """Told that the analyses cover a window, the main window says so in its status bar and
    above the findings, the steps bar offers those steps only, a finding's evidence marks
    the whole trace's slices, and panels that read the whole trace say which steps the
    others cover."""
    whole = open_trace(window, SAMPLE_TRACES / TRACES[0])
    qtbot.waitUntil(lambda: not any(p.busy() for p in window.panels.values()), timeout=60000)
    numbers = whole.steps()["step"].to_numpy()
    a = AnalysedTrace(whole, whole.window_of_steps(int(numbers[1]), int(numbers[2])))
    window.on_analysis(WINDOW, a)
    for name, value in _results(a).items():
        window.on_analysis(name, value[1])
    qtbot.waitUntil(lambda: not any(p.busy() for p in window.panels.values()), timeout=60000)
    which = f"steps {numbers[1]}-{numbers[2]} of 4"
    assert window.window_note.isVisible() and window.findings.note.isVisible()
    assert window.window_note.toolTip() == window.findings.note.text() == a.note
    assert window.window_note.text() == f"Analyses: {which} (those that fit in memory)"
    assert a.note.startswith(f"Analyses cover {which} only: requested")
    assert window.timeline.steps["step"].tolist() == [int(numbers[1]), int(numbers[2])]
    assert window.findings.findings
    window.findings.select(0)
    evidence = np.asarray(window.findings.findings[0].evidence, np.int64)
    assert len(evidence) and sorted(window.findings.evidence.tolist()) == sorted(evidence.tolist())
    ts = whole.slices["ts"].to_numpy()[evidence]
    assert ((ts >= a.window.start_ns) & (ts < a.window.end_ns)).all()
    memory = window.panels["memory"].status.text()
    assert memory.startswith("Could not read memory: ") and memory.endswith(
        f"the other analyses cover {which}"
    )
    operators = window.panels["operators"]
    assert operators.scope.itemText(0) == f"S{which[1:]} (those that fit in memory)"
    assert operators.scope.count() == 3  # the window and its two steps
    window.set_trace(whole)  # the same trace again, analysed whole: the note goes
    assert not window.window_note.isVisible() and not window.findings.note.isVisible()
    qtbot.waitUntil(lambda: window.analysis.isFinished(), timeout=60000)


def test_the_source_panel_follows_the_whole_traces_ids(qtbot: Any, tmp_path: Path) -> None:
    """The Source panel attributes the window's slices: a whole-trace slice inside it shows
    its line, one outside says it is outside, a line selects whole-trace ids."""
    from PyQt6.QtCore import QSettings

    from explorer.ui.panels.source import SourcePanel

    a = _middle(TRACES[0])
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    panel = SourcePanel(settings=settings)
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.updated, timeout=60000):
        panel.set_analysed(a)
    assert " events in steps 1-2 of 4 (those that fit in memory) have a source line" in (
        panel.location.text()
    )
    whole_sources = slice_sources(a.whole.data)
    w = a.window
    assert w is not None
    known = whole_sources.iloc[w.ids]
    known = known[known["file"] != ""]
    sid = int(known.index[len(known) // 2])
    file, line = str(whole_sources["file"].iat[sid]), int(whole_sources["line"].iat[sid])
    panel.on_selection(sid)
    assert _same_file(panel.current_file, file) and panel.current_line == line
    ids = panel.slices_at(panel.current_file, line)
    assert sid in ids.tolist() and (w.rows_of(ids) >= 0).all()
    assert (whole_sources["file"].to_numpy()[ids] == file).all()
    assert (whole_sources["line"].to_numpy()[ids] == line).all()
    outside = int(np.setdiff1d(np.arange(len(a.whole.slices)), w.ids)[0])
    panel.on_selection(outside)
    assert panel.location.text().endswith(
        " is outside steps 1-2 of 4, the steps that fit in memory."
    )


@pytest.mark.parametrize("name", TRACES)
def test_the_dependency_graph_panel_builds_the_windows_steps(qtbot: Any, name: str) -> None:
    """A whole step of the window draws the same graph as the whole trace's (nodes by the
    same slices, the same critical path); a clicked node selects its whole-trace id; a
    slice outside the window says so."""

    from explorer.analysis.graph_layout import graph_layout
    from explorer.ui.panels.dependency_graph import DependencyGraphPanel

    a = _middle(name)
    panel = DependencyGraphPanel()
    qtbot.addWidget(panel)
    panel.resize(1000, 600)
    panel.show()
    with qtbot.waitSignal(panel.updated, timeout=60000):
        panel.set_analysed(a)
    steps = [panel.step.itemData(i) for i in range(panel.step.count())]
    assert steps == a.trace.steps()["step"].tolist() and len(steps) == 2
    with qtbot.waitSignal(panel.updated, timeout=60000):
        panel.mode.setCurrentIndex(1)  # whole step: the window's first
    layout = panel.layout_data
    assert layout is not None and len(layout.nodes) > 10
    ref = graph_layout(a.whole, int(steps[0]), None, panel.hops.value(), panel.max_nodes.value())
    assert layout.critical_ns == ref.critical_ns > 0 and layout.total_nodes == ref.total_nodes
    _same(a, layout.nodes["id"], ref.nodes["id"])  # window ids beside the whole trace's
    target = int(layout.nodes["id"].iat[len(layout.nodes) // 2])
    assert click_graph_node(qtbot, panel, target) == a.whole_ids([target]).tolist()
    w = a.window
    assert w is not None
    panel.on_selection(int(np.setdiff1d(np.arange(len(a.whole.slices)), w.ids)[-1]))
    assert panel.status.text().endswith(" is outside steps 1-2 of 4, the steps that fit in memory.")


def test_details_show_the_line_of_a_slice_in_the_window_only(qtbot: Any) -> None:
    """Source lines by whole-trace id: a slice in the window has its line, one outside none."""
    from explorer.ui.details import DetailsPanel

    a = _middle(TRACES[0])
    w = a.window
    assert w is not None
    details = DetailsPanel()
    qtbot.addWidget(details)
    details.set_trace(a.whole.data)
    details.set_sources(in_whole_ids("slice_sources", slice_sources(a.trace.data), w))
    whole_sources = slice_sources(a.whole.data)
    inside = whole_sources.iloc[w.ids]
    sid = int(inside.index[(inside["file"] != "").to_numpy()][0])
    details.on_selection(sid)
    shown = details.text().split("Source: ")[1].split()[0]
    file, line = shown.rsplit(":", 1)
    assert _same_file(file, str(whole_sources["file"].iat[sid]))
    assert int(line) == int(whole_sources["line"].iat[sid])
    outside = np.setdiff1d(np.flatnonzero(whole_sources["file"].to_numpy() != ""), w.ids)
    assert len(outside)
    details.on_selection(int(outside[0]))
    assert "Source:" not in details.text()


def test_without_a_window_results_are_returned_as_they_are() -> None:
    whole: Trace = explorer.load(str(SAMPLE_TRACES / TRACES[0]), use_cache=False)
    findings = whole.findings()
    assert in_whole_ids("findings", findings, None) is findings


@pytest.fixture
def never_binding_limit() -> Any:
    """A real data-size limit (1 TiB) on this process: the window's code sees a hard limit,
    which never binds; the old one comes back after the test."""
    import resource

    old = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (1 << 40, old[1]))
    yield
    resource.setrlimit(resource.RLIMIT_DATA, old)


def test_under_a_hard_limit_the_panels_wait_for_the_analyses_choice(
    window: Any, qtbot: Any, never_binding_limit: Any
) -> None:
    """Under a hard limit the panels run nothing until the analyses have chosen what fits
    (here the whole trace: no window, no note), then show the whole trace as without one."""
    trace = explorer.load(str(SAMPLE_TRACES / TRACES[0]), use_cache=False)
    window.set_trace(trace)
    operators = window.panels["operators"]
    assert window.panels_held
    assert operators.status.text() == "Waiting for the analyses to choose what fits in memory…"
    assert operators.trace is None and not operators.busy()
    qtbot.waitUntil(lambda: not window.panels_held, timeout=60000)
    assert operators.trace is trace and operators.analysed is None
    qtbot.waitUntil(lambda: window.analysis.isFinished(), timeout=60000)
    qtbot.waitUntil(lambda: operators.model.rowCount() > 0, timeout=60000)
    assert WINDOW not in window.results and not window.window_note.isVisible()
    assert operators.scope.itemText(0) == "Whole trace"


@pytest.mark.parametrize("name", TRACES)
def test_the_operators_panel_over_a_range_of_the_window(qtbot: Any, name: str) -> None:
    """A range inside the window's steps (its first step) aggregates as over the whole
    trace: counts, total, self and device time; one reaching past the window says only the
    part within its steps is counted."""
    from explorer.analysis.operators import operator_stats
    from explorer.ui.panels.operators import OperatorsPanel

    a = _middle(name)
    w = a.window
    assert w is not None
    panel = OperatorsPanel()
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.updated, timeout=60000):
        panel.set_analysed(a)
    steps = w.steps
    start, end = int(steps["start_ns"].iat[0]), int(steps["end_ns"].iat[0])
    with qtbot.waitSignal(panel.updated, timeout=60000):
        panel.on_range(start, end)
    assert "only what lies in" not in panel.status.text()
    ref = operator_stats(a.whole.data, start, end)
    got = panel.stats
    keys = ["name", "kind", "count", "total_ns", "self_ns", "device_ns"]
    assert len(got) > 10
    pd.testing.assert_frame_equal(
        got[keys].sort_values(["name", "kind"]).reset_index(drop=True),
        ref[keys].sort_values(["name", "kind"]).reset_index(drop=True),
        check_categorical=False,
    )
    with qtbot.waitSignal(panel.updated, timeout=60000):
        panel.on_range(0, end)
    assert panel.status.text().endswith(
        " · only what lies in steps 1-2 of 4, the steps that fit in memory"
    )


#: Real GPU traces from ../shared/traces with more than one step (NCCL collectives on
#: NVIDIA; a sampled training rank), windowed away from their first step.
SHARED = (
    pytest.param("nccl_parser_config__nccl_data.json.gz", marks=pytest.mark.slow),  # ~5 s
    "timeline_analysis__sampled_rank-0.json.gz",
)


@pytest.mark.parametrize("name", SHARED)
def test_on_real_gpu_traces_every_id_names_the_whole_traces_slice(
    shared_traces: Path, name: str
) -> None:
    """Windowed from their second step on, real GPU traces (kernels, launches, NCCL
    collectives) get each analysis in whole-trace ids that name the same slices, and the
    steps and breakdown of the whole trace for those steps."""
    whole = explorer.load(str(shared_traces / name), use_cache=False)
    numbers = whole.steps()["step"].to_numpy()
    a = AnalysedTrace(whole, whole.window_of_steps(int(numbers[1]), int(numbers[-1])))
    w = a.window
    assert w is not None and (w.ids != np.arange(len(w.ids))).any()
    results = _results(a)
    steps = results["steps"][1].reset_index(drop=True)
    ref = whole.steps()
    pd.testing.assert_frame_equal(
        steps, ref[ref["step"] >= numbers[1]].reset_index(drop=True), check_categorical=False
    )
    bd = whole.breakdown()
    pd.testing.assert_frame_equal(
        results["breakdown"][1].reset_index(drop=True),
        bd[bd["step"] >= numbers[1]].reset_index(drop=True),
        check_categorical=False,
    )
    assert sum(len(f.evidence) for f in results["findings"][0]) > 10  # launch-bound, NCCL
    _same_evidence_and_graph(a, results)
