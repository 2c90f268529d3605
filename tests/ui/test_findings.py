"""Clicking a finding zooms the timeline to its evidence and explains it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from explorer.ui.findings_panel import FindingsPanel


def test_findings_are_listed_ranked_with_time_lost_and_share(
    window, open_trace, small_trace_file
) -> None:
    trace = open_trace(window, small_trace_file)
    expected = trace.findings()
    assert expected, "the small trace has a sync stall and unoverlapped copies"
    table = window.findings.table
    assert table.rowCount() == len(expected)
    assert table.item(0, 1).text() == expected[0].title
    lost = [f.time_lost_ns for f in window.findings.findings]
    assert lost == sorted(lost, reverse=True)
    assert table.item(0, 3).text().endswith("%")


def test_clicking_a_finding_zooms_to_and_highlights_its_evidence(
    window, open_trace, small_trace_file, qtbot
) -> None:
    trace = open_trace(window, small_trace_file)
    window.timeline.zoom(0.01)  # start far from the evidence
    for row, finding in enumerate(window.findings.findings):
        window.findings.select(row)
        qtbot.wait(10)
        evidence = np.asarray(finding.evidence)
        assert len(evidence)
        ts = trace.slices["ts"].to_numpy()[evidence]
        end = ts + trace.slices["dur"].to_numpy()[evidence]
        a, b = window.timeline.visible_range()
        assert a <= ts.min() and end.max() <= b, f"{finding.kind}: evidence outside the view"
        assert list(window.timeline.evidence) == sorted(set(evidence.tolist()))
        assert len(window.timeline.highlights) == 0, "evidence is not drawn as search hits"
        text = window.findings.text.toPlainText()
        assert finding.title in text
        assert finding.recommendation[:40] in text


def test_next_and_previous_step_through_the_evidence_in_time_order(
    window, open_trace, small_trace_file, qtbot
) -> None:
    """Real clicks on Next / Previous and the ] / [ keys: each goes to one evidence event,
    in time order, zoomed to it and selected; the label counts along."""
    from PyQt6.QtCore import Qt

    trace = open_trace(window, small_trace_file)
    row = max(
        range(len(window.findings.findings)),
        key=lambda r: len(window.findings.findings[r].evidence),
    )
    finding = window.findings.findings[row]
    window.findings.select(row)
    ids = np.asarray(finding.evidence)
    ts = trace.slices["ts"].to_numpy()
    in_time_order = ids[np.argsort(ts[ids], kind="stable")]
    assert len(in_time_order) >= 2
    assert window.findings.evidence_label.text() == f"{len(ids)} events, all shown"
    seen = []
    for _ in range(len(in_time_order)):
        qtbot.mouseClick(window.findings.next_button, Qt.MouseButton.LeftButton)
        sid = window.timeline.selected
        seen.append(sid)
        a, b = window.timeline.visible_range()
        dur = int(trace.slices["dur"].iat[sid])
        assert a <= ts[sid] and ts[sid] + dur <= b
        assert (b - a) <= max(dur * 2, 10_000), "zoomed to the one event, not to all of them"
    assert seen == in_time_order.tolist()
    assert window.findings.evidence_label.text() == f"{len(ids)} of {len(ids)}"
    qtbot.mouseClick(window.findings.next_button, Qt.MouseButton.LeftButton)  # wraps
    assert window.timeline.selected == in_time_order[0]
    qtbot.mouseClick(window.findings.prev_button, Qt.MouseButton.LeftButton)
    assert window.timeline.selected == in_time_order[-1]
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    window.findings.table.setFocus()
    qtbot.keyClick(window.findings.table, Qt.Key.Key_BracketLeft)  # the button's shortcut
    qtbot.waitUntil(lambda: window.timeline.selected == in_time_order[-2], timeout=2000)


def test_a_finding_with_ranges_but_no_events_asks_for_its_range(qtbot) -> None:
    from explorer.analysis.finding import Finding

    panel = FindingsPanel()
    qtbot.addWidget(panel)
    f = Finding(
        kind="input_stall",
        title="Input stall",
        time_lost_ns=5000,
        share=0.5,
        ranges=[(100, 200), (400, 900)],
        source_lines=[("train.py", 42, "loop")],
        explanation="The device waited for the data loader.",
        recommendation="More workers.",
    )
    panel.set_findings([f])
    with qtbot.waitSignal(panel.range_requested) as sig:
        panel.select(0)
    assert sig.args == [100, 900]
    assert "train.py:42" in panel.text.toPlainText()
    with qtbot.waitSignal(panel.source_requested) as src:
        from PyQt6.QtCore import QUrl

        panel._link(QUrl("source:42:train.py"))
    assert src.args == ["train.py", 42]


SAMPLE = (
    Path(__file__).resolve().parents[2]
    / "sample_traces"
    / "cpu_compile_graph_break.pt.trace.json.gz"
)


def test_a_real_runs_compile_finding_leads_to_its_source_line(window, open_trace, qtbot) -> None:
    """A real torch.compile run (sample_traces/): the compile finding zooms to the compile
    events, and its source line opens in the Source panel."""
    trace = open_trace(window, SAMPLE)
    kinds = [f.kind for f in window.findings.findings]
    assert "compile" in kinds
    row = kinds.index("compile")
    finding = window.findings.findings[row]
    window.findings.select(row)
    ev = np.asarray(finding.evidence)
    a, b = window.timeline.visible_range()
    ts = trace.slices["ts"].to_numpy()[ev]
    assert a <= ts.min() and (ts + trace.slices["dur"].to_numpy()[ev]).max() <= b
    assert set(trace.slices["kind"].astype(str).to_numpy()[ev]) & {"compile", "cpu_op", "python"}
    path, line, _ = finding.source_lines[0]
    from PyQt6.QtCore import QUrl

    window.findings._link(QUrl(f"source:{int(line)}:{path}"))
    source = window.panels["source"]
    assert source.current_line == int(line)
    assert window.docks["source"].isVisible()


def test_clicking_a_finding_shows_its_source_line(window, open_trace, qtbot) -> None:
    """A real mouse click on a finding's row (not only ``--finding N``) opens its first
    source line in the Source panel and brings that panel to the front; the Evidence
    header names its steps once (``steps 0-7``, never ``steps 8 steps``)."""
    from PyQt6.QtCore import Qt

    open_trace(window, SAMPLE)
    findings = window.findings.findings
    row = next(r for r, f in enumerate(findings) if f.source_lines)
    window.docks["operators"].raise_()
    table = window.findings.table
    rect = table.visualRect(table.model().index(row, 1))
    qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    path, line, _ = findings[row].source_lines[0]
    source = window.panels["source"]
    qtbot.waitUntil(lambda: source.current_line == int(line), timeout=5000)
    assert source.current_file == str(path)
    assert not window.docks["source"].visibleRegion().isEmpty(), "the Source tab is in front"
    text = window.findings.text.toPlainText()
    assert "steps steps" not in text and not any(f"steps {n} steps" in text for n in range(99))
    if findings[row].steps:
        steps = sorted(findings[row].steps)
        first = f"steps {steps[0]}-{steps[-1]}" if len(steps) > 1 else f"step {steps[0]}"
        assert first in text, text
