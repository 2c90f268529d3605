"""``trace.plot.*`` and ``job.plot.heatmap()`` draw the numbers the reports print.

Every check reads the figure back (bar heights, line data, image cells, labels) and
compares it with the report document of the same trace (``explorer.report``, the public
report API) or the job report document: a chart that drifts from the report fails here.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_hex
from matplotlib.container import BarContainer

import explorer
from explorer.analysis.breakdown import CATEGORIES
from explorer.analysis.steps import step_times
from explorer.palette import CATEGORY_LABELS, KIND_COLORS
from explorer.plot import MISSING
from explorer.plot.figure import Figure, byte_unit, time_unit
from explorer.plot.memory import NO_MEMORY
from explorer.report import document, render
from explorer.units import fmt_bytes, fmt_ns
from tests.conftest import ROOT, SAMPLE_TRACES

SLOW_LOADER = SAMPLE_TRACES / "cpu_slow_dataloader.pt.trace.json.gz"
AMD = "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"


def _bars(ax) -> dict[str, list[float]]:  # type: ignore[no-untyped-def]
    """Category → bar heights (axis units) of a stacked-bar axis, from its containers."""
    return {
        c.get_label(): [p.get_height() for p in c.patches]
        for c in ax.containers
        if isinstance(c, BarContainer)
    }


def _texts(fig: Figure) -> list[str]:
    return [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]


def test_breakdown_bars_are_the_reports_step_times() -> None:
    trace = explorer.load(SLOW_LOADER)
    doc = document(trace.data)
    fig = trace.plot.breakdown()
    (ax,) = fig.axes
    bars = _bars(ax)
    # One bar per step for every category, in the report's category order.
    assert list(bars) == [CATEGORY_LABELS[c] for c in CATEGORIES]
    assert {len(h) for h in bars.values()} == {len(doc["steps"])} == {4}
    totals = np.sum(list(bars.values()), axis=0)
    scale, unit = time_unit(max(s["dur_ns"] for s in doc["steps"]))
    assert ax.get_ylabel() == f"time ({unit})" == "time (ms)"
    # Each bar is its step's time in the report; the whole steps' are the step times
    # every verb reports (steps.step_times).
    np.testing.assert_allclose(totals * scale, [s["dur_ns"] for s in doc["steps"]], rtol=1e-12)
    np.testing.assert_allclose(totals * scale, step_times(trace.data), rtol=1e-12)
    # Each segment is the report's per-step figure of its category.
    for cat in CATEGORIES:
        want = [s["breakdown"]["host"][cat] for s in doc["steps"]]
        np.testing.assert_allclose(np.array(bars[CATEGORY_LABELS[cat]]) * scale, want, rtol=1e-12)
    # The legend names the categories that hold time, and only those.
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    held = [CATEGORY_LABELS[c] for c in CATEGORIES if doc["summary"]["breakdown"]["host"][c]]
    assert legend == held and "host-bound idle" in legend


def test_breakdown_marks_the_partial_step_of_a_real_amd_trace(shared_traces: Path) -> None:
    trace = explorer.load(shared_traces / AMD)
    doc = document(trace.data)
    fig = trace.plot.breakdown()
    (ax,) = fig.axes
    assert ax.get_title(loc="left") == "Step time by category — rocm:2"
    partial = [s["step"] for s in doc["steps"] if s["partial"]]
    assert partial, "the AMD trace's last step is cut short"
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == [
        f"{s['step']}\n(partial)" if s["partial"] else str(s["step"]) for s in doc["steps"]
    ]
    scale, _ = time_unit(max(s["dur_ns"] for s in doc["steps"]))
    totals = np.sum(list(_bars(ax).values()), axis=0) * scale
    np.testing.assert_allclose(totals, [s["dur_ns"] for s in doc["steps"]], rtol=1e-12)
    # The partial step's segments are hatched, the whole step's are not.
    hatched = {
        i
        for c in ax.containers
        for i, p in enumerate(c.patches)
        if p.get_hatch() and p.get_height() > 0
    }
    assert hatched == {i for i, s in enumerate(doc["steps"]) if s["partial"]}


def test_memory_curve_peaks_where_the_report_says() -> None:
    trace = explorer.load(SLOW_LOADER)
    (peak,) = document(trace.data)["memory"]["peaks"]
    fig = trace.plot.memory()
    (ax,) = fig.axes
    lines = {ln.get_gid(): ln for ln in ax.get_lines()}
    alloc = lines[f"allocated:{peak['device']}"]
    b_scale, b_unit = byte_unit(peak["peak_bytes"])
    assert ax.get_ylabel() == f"memory ({b_unit})"
    assert float(np.max(alloc.get_ydata())) * b_scale == pytest.approx(
        peak["peak_bytes"], rel=1e-12
    )
    t_scale, _ = time_unit(float(trace.memory["ts"].max()))
    marker = lines[f"peak:{peak['device']}"]
    assert marker.get_xdata()[0] * t_scale == pytest.approx(peak["ts"], rel=1e-12)
    assert any(f"peak {fmt_bytes(peak['peak_bytes'])}" in t for t in _texts(fig))
    # Every step is shaded or lies between two shaded ones: half of them, alternately.
    assert len(ax.patches) == (len(trace.steps()) + 1) // 2


def test_memory_of_a_trace_without_memory_events_says_so(shared_traces: Path) -> None:
    trace = explorer.load(shared_traces / AMD)
    assert len(trace.memory) == 0
    assert NO_MEMORY in _texts(trace.plot.memory())


def test_critical_path_bar_is_the_reports_composition() -> None:
    trace = explorer.load(SLOW_LOADER)
    cp = json.loads(render(trace.data, "json"))["critical_path"]
    fig = trace.plot.critical_path()
    top, ops = fig.axes
    segs = {p.get_gid(): p.get_width() for p in top.patches}
    scale, unit = time_unit(cp["length_ns"])
    assert top.get_xlabel() == f"time on the path ({unit})"
    held = {f"path:{c}": ns for c, ns in cp["summary"].items() if ns}
    assert set(segs) == set(held)
    for gid, ns in held.items():
        assert segs[gid] * scale == pytest.approx(ns, rel=1e-12)
    assert sum(segs.values()) * scale == pytest.approx(cp["length_ns"], rel=1e-12)
    names = [t.get_text() for t in ops.get_yticklabels()]
    assert names == [o["name"] for o in cp["top_ops"][:10]]
    assert names[0] == "<built-in function sleep>"  # the loader's sleep holds the path
    # Each op's bar has its kind's colour (the timeline's): the sleep is Python, the rest ops.
    colors = [to_hex(p.get_facecolor()) for p in ops.patches]
    assert colors == [KIND_COLORS[o["kind"]] for o in cp["top_ops"][:10]]
    assert colors[0] == KIND_COLORS["python"] != colors[1]
    assert fig.get_suptitle().startswith(f"Critical path of {cp['scope']}")


def test_a_figure_shows_itself_in_ipython() -> None:
    from IPython.core.formatters import DisplayFormatter

    fig = explorer.load(SLOW_LOADER).plot.breakdown()
    data, _ = DisplayFormatter().format(fig)
    assert data["image/png"][:8] == b"\x89PNG\r\n\x1a\n"


def test_without_matplotlib_a_plot_says_what_to_install() -> None:
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "import explorer\n"
        "t = explorer.load(sys.argv[1])\n"
        "try:\n"
        "    t.plot.breakdown()\n"
        "except explorer.ExplorerError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(SLOW_LOADER)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    assert out.strip() == MISSING
    assert "pip install 'explorer[notebook]'" in MISSING


def test_a_chart_too_big_for_inline_svg_is_embedded_as_png(monkeypatch: pytest.MonkeyPatch) -> None:
    from explorer.plot import figure

    fig = explorer.load(SLOW_LOADER).plot.breakdown()
    svg = figure.figure_html(fig)
    assert svg.startswith("<svg") and "Step time by category" in svg
    monkeypatch.setattr(figure, "MAX_SVG_CHARS", len(svg) - 1)
    img = figure.figure_html(fig)
    prefix = "<img alt='chart' src='data:image/png;base64,"
    assert img.startswith(prefix)
    png = base64.b64decode(img[len(prefix) : img.index("'", len(prefix))])
    assert png == fig._repr_png_()


def test_critical_path_of_one_step_is_that_steps_path() -> None:
    trace = explorer.load(SLOW_LOADER)
    cp = trace.critical_path(step=2)
    fig = trace.plot.critical_path(step=2)
    top = fig.axes[0]
    assert fig.get_suptitle() == f"Critical path of step 2: {fmt_ns(cp.length_ns)}"
    scale, _ = time_unit(cp.length_ns)
    widths = {p.get_gid(): p.get_width() * scale for p in top.patches}
    want = {f"path:{r.category}": int(r.ns) for r in cp.summary.itertuples() if r.ns}
    assert widths.keys() == want.keys()
    for gid, ns in want.items():
        assert widths[gid] == pytest.approx(ns, rel=1e-12)
