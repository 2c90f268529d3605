"""Source panel on a real torch.profiler run with stacks: the file behind a slice, its heat,
line clicks selecting events, and files that are not on this machine."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PyQt6.QtCore import QSettings, Qt

import explorer
from explorer.ui.panels.source import SETTINGS_KEY, SourcePanel, resolve_source

THIS_FILE = Path(__file__).resolve()
ROOT = THIS_FILE.parents[2]


def matmul_heavy_step(x):  # the line the profiler attributes this function's ops to
    y = x @ x
    return y.relu().sum()


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory) -> Path:
    """A real CPU profile with Python stacks of the function above (not synthetic)."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(96, 96)
    path = tmp_path_factory.mktemp("src") / "stack.pt.trace.json"
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        for _ in range(3):
            matmul_heavy_step(x)
    prof.export_chrome_trace(str(path))
    return path


@pytest.fixture(scope="module")
def trace(trace_path):
    return explorer.load(trace_path)


@pytest.fixture
def settings(tmp_path) -> QSettings:
    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


def _panel(qtbot, trace, settings) -> SourcePanel:
    p = SourcePanel(settings=settings)
    qtbot.addWidget(p)
    p.resize(900, 600)
    p.show()
    with qtbot.waitSignal(p.updated, timeout=30_000):
        p.set_trace(trace)
    return p


def _matmul_slice(trace) -> int:
    return int(np.flatnonzero((trace.slices["name"] == "aten::matmul").to_numpy())[0])


def _is_this_file(name: str) -> bool:
    return name != "" and THIS_FILE.as_posix().endswith(Path(name).as_posix())


def test_selection_opens_the_file_at_the_line_with_heat(qtbot, trace, settings):
    panel = _panel(qtbot, trace, settings)
    sid = _matmul_slice(trace)
    panel.on_selection(sid)
    assert panel.current_path is not None, panel.location.text()
    assert panel.current_path.resolve() == THIS_FILE
    assert _is_this_file(panel.current_file)
    line = panel.current_line
    assert panel.view.textCursor().blockNumber() + 1 == line
    text_line = panel.view.document().findBlockByNumber(line - 1).text()
    assert "matmul_heavy_step" in text_line
    lines = panel.data.lines
    mine = lines[lines["file"] == panel.current_file]
    row = mine[mine["line"] == line].iloc[0]
    assert row["host_ns"] > 0
    # Heat is relative to the file's hottest line (which line that is depends on the run:
    # under load another line of this file can take longer than the matmul's).
    hottest = mine.loc[mine["host_ns"].idxmax()]
    assert panel.view.heat[int(hottest["line"])] == pytest.approx(1.0)
    assert panel.view.heat[line] == pytest.approx(row["host_ns"] / hottest["host_ns"])
    assert panel.view.heat[line] > 0 and max(panel.view.heat.values()) == pytest.approx(1.0)
    assert "host" in panel.view.line_tooltip(line)
    assert panel.view.times[line].endswith("s")  # the line's time, written in the gutter
    assert str(line) in panel.location.text()
    panel.heat_metric.setCurrentText("device time")  # CPU run: no device time, so no heat
    assert panel.view.heat == {} and panel.view.times == {}


def test_clicking_a_line_selects_its_events(qtbot, trace, settings):
    panel = _panel(qtbot, trace, settings)
    panel.on_selection(_matmul_slice(trace))
    line = panel.current_line
    panel.view.go_to_line(1)  # move away first, without emitting
    block = panel.view.document().findBlockByNumber(line - 1)
    rect = panel.view.blockBoundingGeometry(block).translated(panel.view.contentOffset())
    pos = rect.center().toPoint()
    pos.setX(20)
    with qtbot.waitSignal(panel.slices_selected, timeout=2_000) as blocker:
        qtbot.mouseClick(panel.view.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    ids = blocker.args[0]
    sources = panel.data.sources
    assert len(ids) > 0
    assert (sources["line"].to_numpy()[ids] == line).all()
    names = set(trace.slices["name"].to_numpy()[ids].astype(str))
    assert {"aten::matmul", "aten::relu", "aten::sum"} <= names
    expected = np.flatnonzero(
        (sources["file"].to_numpy() == panel.current_file) & (sources["line"].to_numpy() == line)
    )
    assert ids.tolist() == expected.tolist()


def test_missing_file_then_source_root(qtbot, trace_path, tmp_path, settings):
    """Paths from another machine: the panel says so; a source root finds the file by
    dropping leading path components, and is remembered."""
    doc = json.loads(trace_path.read_text())
    original = None
    for event in doc["traceEvents"]:
        name = event.get("name", "")
        if event.get("cat") == "python_function" and THIS_FILE.name in name:
            original = name.split("(")[0]
            event["name"] = name.replace(original, "/ci/runner/checkout/tests/ui/" + THIS_FILE.name)
    assert original is not None
    moved = tmp_path / "elsewhere" / "moved.pt.trace.json"
    moved.parent.mkdir()
    moved.write_text(json.dumps(doc))
    trace = explorer.load(moved)
    panel = _panel(qtbot, trace, settings)
    panel.on_selection(_matmul_slice(trace))
    assert panel.current_path is None
    assert "not on this machine" in panel.location.text()
    assert panel.view.toPlainText() == ""

    root = THIS_FILE.parents[2]  # the project root: holds tests/ui/<this file>
    panel.set_source_root(str(root))
    assert panel.current_path is not None and panel.current_path.resolve() == THIS_FILE
    assert "found at" in panel.location.text()
    assert settings.value(SETTINGS_KEY) == str(root)
    again = SourcePanel(settings=settings)
    qtbot.addWidget(again)
    assert again.source_root() == str(root)


def test_resolve_source_strips_leading_components(tmp_path):
    (tmp_path / "pkg").mkdir()
    target = tmp_path / "pkg" / "train.py"
    target.write_text("print('hi')\n")
    assert (
        resolve_source("/home/someone/job/pkg/train.py", str(tmp_path))
        == tmp_path / "pkg" / "train.py"
    )
    assert resolve_source("/home/someone/job/pkg/train.py", None) is None
    assert resolve_source("pkg/train.py", None, str(tmp_path)) == target
    assert resolve_source("", str(tmp_path)) is None


def test_trace_without_stacks_says_so(qtbot, shared_traces, settings):
    trace = explorer.load(shared_traces / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    panel = _panel(qtbot, trace, settings)
    assert "no Python stacks" in panel.location.text()
    panel.on_selection(0)
    assert "No source line" in panel.location.text()
    assert panel.view.toPlainText() == ""
    panel.set_trace(None)
    assert panel.location.text() == "No trace"


@pytest.mark.parametrize(("scenario", "tag"), [("sync_storm", "S"), ("cpu_fallback", "F")])
def test_gutter_marks_syncs_and_fallbacks(qtbot, tmp_path, settings, scenario, tag):
    """SYNTHETIC traces (scenario generator): the injected sync storm / CPU fallback line
    carries its count in the gutter, and stall time heats the sync line. The generator's
    source file does not exist anywhere, so a stand-in with numbered lines is placed under a
    source root (the panel only needs the file to have the lines)."""
    from explorer import scenarios

    trace = explorer.load(scenarios.write(scenario, tmp_path / f"{scenario}.json"))
    assert trace.synthetic
    truth = trace.metadata["explorer_injected"][0]
    file, line = truth["source_line"]
    stand_in = tmp_path / "root" / Path(file).relative_to("/")
    stand_in.parent.mkdir(parents=True)
    stand_in.write_text("".join(f"# stand-in line {i}\n" for i in range(1, 200)))
    panel = _panel(qtbot, trace, settings)
    panel.set_source_root(str(tmp_path / "root"))
    assert panel.show_location(file, line)
    assert panel.current_path == stand_in
    assert panel.view.marks[line] == f"{tag}{truth['count']}"
    assert f"{truth['count']} {'sync' if tag == 'S' else 'fallback'}" in panel.location.text()
    if tag == "S":
        panel.heat_metric.setCurrentText("stall time")
        assert panel.view.heat[line] == pytest.approx(1.0)


def test_a_file_next_to_the_trace_wins_over_the_recorded_path(qtbot, tmp_path, settings):
    """A real run (sample_traces/) recorded /…/scripts/make_sample_traces.py. Copied with
    its trace to another folder, the Source panel opens the copy beside the trace (first),
    not the recorded path — and the recorded path when nothing is beside the trace."""
    import shutil

    sample = ROOT / "sample_traces" / "cpu_compile_graph_break.pt.trace.json.gz"
    trace = explorer.load(sample)
    finding = trace.findings()[0]
    recorded, line, _ = finding.source_lines[0]
    recorded_path = Path(str(recorded))
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.copy(sample, moved / sample.name)
    lines = (
        recorded_path.read_text().splitlines()
        if recorded_path.is_file()
        else [f"line {k}" for k in range(1, int(line) + 5)]
    )
    lines[int(line) - 1] = lines[int(line) - 1] + "  # THE COPY BESIDE THE TRACE"
    (moved / recorded_path.name).write_text("\n".join(lines) + "\n")

    panel = _panel(qtbot, explorer.load(moved / sample.name), settings)
    assert panel.show_location(str(recorded), int(line))
    assert panel.current_path == moved / recorded_path.name
    assert "THE COPY BESIDE THE TRACE" in panel.view.toPlainText()
    if recorded_path.is_file():  # on the machine that recorded it: the recorded path next
        (moved / recorded_path.name).unlink()
        assert panel.show_location(str(recorded), int(line))
        assert panel.current_path == recorded_path
