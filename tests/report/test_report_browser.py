"""The HTML report as a person sees it: headless Chromium (Debian's ``chromium``, which
``.ci/run`` installs) opens the report of a sample trace and of two shared traces; the page
logs no console error, and every chart is drawn where the page puts it — the SVG's largest
bar is there in its colour, a curve's line is there in its colour.

Skipped only when no Chromium is installed outside CI; under ``CI=true`` a missing browser
fails, so CI never passes without looking.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

import explorer
from explorer.report import render
from tests.report.browser import A4_WIDTH, find_chromium, load

#: Each test drives a headless Chromium process (seconds each).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def chromium() -> str:
    binary = find_chromium()
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but no chromium is installed (.ci/run installs it)")
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    return binary


def _pixels(png: bytes) -> np.ndarray:
    """The screenshot as an H × W × 3 array (Qt decodes the PNG: a base dependency; the
    caller holds the test's QApplication, which QImage's decoders need)."""
    from PyQt6.QtGui import QImage

    img = QImage.fromData(png, "PNG").convertToFormat(QImage.Format.Format_RGB888)
    assert not img.isNull()
    ptr = img.constBits()
    assert ptr is not None
    ptr.setsize(img.sizeInBytes())
    rows = np.frombuffer(ptr, np.uint8).reshape(img.height(), img.bytesPerLine())
    # a copy: the array must outlive the QImage whose memory it reads
    return rows[:, : 3 * img.width()].reshape(img.height(), img.width(), 3).copy()


def _rgb(hex_colour: str) -> np.ndarray:
    return np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)])


def _near(region: np.ndarray, hex_colour: str, tol: int = 10) -> np.ndarray:
    return np.all(np.abs(region.astype(int) - _rgb(hex_colour)) <= tol, axis=-1)


def _check_drawn(svg: str, box: dict, pixels: np.ndarray) -> None:
    """The chart ``svg`` (its markup) is drawn in ``box`` (its place on the page)."""
    root = ET.fromstring(svg)  # well-formed: a browser would draw a broken SVG partly
    ns = "{http://www.w3.org/2000/svg}"
    scale = box["width"] / float(root.get("width", box["width"]))
    x0, y0 = round(box["x"]), round(box["y"])
    region = pixels[y0 : y0 + round(box["height"]), x0 : x0 + round(box["width"])]
    assert region.size and (region.min(axis=-1) < 235).mean() > 0.005, "the chart is blank"
    rects = root.findall(f"{ns}rect")
    if rects:
        big = max(rects, key=lambda r: float(r.get("width", 0)) * float(r.get("height", 0)))
        x, y = float(big.get("x", 0)) * scale, float(big.get("y", 0)) * scale
        w, h = float(big.get("width", 0)) * scale, float(big.get("height", 0)) * scale
        assert w >= 2 and h >= 2, "the largest bar is too small to look for"
        inside = region[round(y) + 1 : round(y + h) - 1, round(x) + 1 : round(x + w) - 1]
        share = _near(inside, big.get("fill", "")).mean()
        assert share > 0.9, f"{box['kind']}: its largest bar is {share:.0%} its colour on screen"
    for line in root.findall(f"{ns}polyline"):
        drawn = int(_near(region, line.get("stroke", ""), tol=40).sum())
        assert drawn > 50, f"{box['kind']}: the {line.findtext(f'{ns}title')} curve is not drawn"


def _report_in_browser(chromium: str, trace_path: Path, tmp_path: Path) -> tuple[str, list]:
    """Render ``trace_path``'s HTML report, open it, check it; its HTML and chart boxes."""
    return _page_in_browser(chromium, render(explorer.load(trace_path).data, "html"), tmp_path)


def _page_in_browser(chromium: str, html: str, tmp_path: Path) -> tuple[str, list]:
    page_path = tmp_path / "report.html"
    page_path.write_text(html, encoding="utf-8")
    page = load(chromium, page_path)
    assert page.errors == [], page.errors
    svgs = re.findall(r"<svg class='chart'.*?</svg>", html, flags=re.S)
    assert [c["kind"] for c in page.charts] == re.findall(r"data-chart='(\w+)'", html)
    pixels = _pixels(page.png)
    assert pixels.shape[0] == page.height and pixels.shape[1] >= 1000
    for svg, box in zip(svgs, page.charts, strict=True):
        assert box["width"] > 100 and box["height"] > 20, box
        _check_drawn(svg, box, pixels)
    return html, page.charts


def test_the_instrument_sees_a_console_error(chromium: str, tmp_path: Path) -> None:
    """The console check can fail: a page that logs an error and throws is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<!DOCTYPE html><html><body><p>x</p><script>console.error('broken chart');"
        "undefined_function();</script></body></html>"
    )
    errors = load(chromium, bad).errors
    assert any("broken chart" in e for e in errors) and len(errors) == 2, errors


def test_sample_report_draws_every_chart(
    chromium: str, sample_traces: Path, tmp_path: Path, qapp: object
) -> None:
    path = sample_traces / "cpu_slow_dataloader.pt.trace.json.gz"
    html, charts = _report_in_browser(chromium, path, tmp_path)
    # a real CPU run with memory events: the step bars, the memory curve, the path's parts
    assert sorted(c["kind"] for c in charts) == ["bars", "composition", "curve"]
    # its finding's lines link to their rows in the source-lines table
    links = set(re.findall(r"<a href='#(line-\d+)'>", html))
    assert links and all(f"<tr id='{a}'>" in html for a in links)
    # printed, every chart fits an A4 page's width and is still drawn
    page_path = tmp_path / "report.html"
    printed = load(chromium, page_path, width=A4_WIDTH, media="print")
    assert printed.errors == [] and len(printed.charts) == len(charts)
    pixels = _pixels(printed.png)
    svgs = re.findall(r"<svg class='chart'.*?</svg>", html, flags=re.S)
    for svg, box in zip(svgs, printed.charts, strict=True):
        assert box["x"] >= 0 and box["x"] + box["width"] <= A4_WIDTH, box
        _check_drawn(svg, box, pixels)


@pytest.mark.parametrize(
    "name",
    [
        "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        "mtia_inference_trace__mtia_inference_rank_0.json.gz",
    ],
)
def test_shared_trace_reports_draw_their_charts(
    chromium: str, shared_traces: Path, tmp_path: Path, name: str, qapp: object
) -> None:
    _, charts = _report_in_browser(chromium, shared_traces / name, tmp_path)
    kinds = {c["kind"] for c in charts}
    assert {"bars", "composition"} <= kinds


def test_job_report_draws_its_step_matrix(
    chromium: str, sample_traces: Path, tmp_path: Path, qapp: object
) -> None:
    from explorer.job import job_document
    from explorer.job.render import render as render_job

    doc = job_document(
        str(sample_traces / "ddp_4rank_slow_input"), store=tmp_path / "store", workers=2
    )
    _, charts = _page_in_browser(chromium, render_job(doc, "html"), tmp_path)
    assert [c["kind"] for c in charts] == ["heatmap"]
