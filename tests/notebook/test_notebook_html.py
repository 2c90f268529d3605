"""What a notebook shows for a trace, its findings, a report, a diff and a job.

Each display is taken the way Jupyter takes it (IPython's display formatter) and checked
against the analysis results it shows: the findings' titles and lines, the report's step
figures, the diff's medians, the job's straggler and its line; the charts are inline SVG
and nothing is fetched.
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from html import escape
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from IPython.core.formatters import DisplayFormatter

import explorer
from explorer.job_api import Job
from explorer.notebook.html import report_breakdown
from explorer.plot import MISSING, JobPlots
from explorer.plot.figure import time_unit
from explorer.units import fmt_ns
from tests.conftest import ROOT, SAMPLE_TRACES

SLOW_LOADER = SAMPLE_TRACES / "cpu_slow_dataloader.pt.trace.json.gz"
CNN = SAMPLE_TRACES / "cpu_cnn.pt.trace.json.gz"


def _html(obj: Any) -> str:
    data, _ = DisplayFormatter().format(obj)
    html = data["text/html"]
    assert isinstance(html, str)
    return html


def _self_contained(html: str) -> None:
    assert "<script" not in html.lower()
    # Nothing to fetch: no src/href to anywhere (the SVG's xmlns is a name, not a fetch).
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html, re.I)


def _chart(html: str, name: str) -> str:
    m = re.search(rf"<div class='chart' data-chart='{name}'>(<svg.*?</svg>)</div>", html, re.S)
    assert m, f"no {name} chart"
    return m.group(1)


def test_a_trace_shows_its_headline_chart_findings_and_lines() -> None:
    trace = explorer.load(SLOW_LOADER)
    html = _html(trace)
    _self_contained(html)
    doc = trace.report().document
    s = doc["summary"]
    assert f"{s['steps']} step(s), mean {fmt_ns(s['mean_step_ns'])}" in html
    found = trace.findings()
    assert found, "the slow loader has its input stall"
    for f in found:
        assert escape(f.title) in html
        for file, line, fn in f.source_lines[:3]:
            assert escape(f"{file}:{line} ({fn})") in html
    assert f"Most time lost: <b>{escape(found[0].title)}</b>" in html
    for r in trace.by_source().head(10).itertuples():
        assert escape(f"{r.file}:{r.line} ({r.function})") in html
    svg = _chart(html, "breakdown")
    # The chart's text is text: its title, the step numbers and the categories that hold time.
    assert "Step time by category — host" in svg
    assert "host-bound idle" in svg and "compute" in svg
    assert "data movement" not in svg  # no time in it, so not in the legend


def test_findings_show_each_finding_with_its_lines() -> None:
    found = explorer.load(explorer.load(SLOW_LOADER).path).findings()
    html = _html(found)
    _self_contained(html)
    assert f"Findings ({len(found)}, ranked by time lost)" in html
    for i, f in enumerate(found, 1):
        assert escape(f"{i}. [{f.kind}] {f.title}") in html
        assert f"{100 * f.share:.1f}% of step time" in html
        assert escape(f"{f.source_lines[0][0]}:{f.source_lines[0][1]}") in html
    # Still the list the analysis returned.
    assert [f.title for f in found] == [f.title for f in explorer.load(SLOW_LOADER).findings()]


def test_a_report_of_one_step_shows_that_step() -> None:
    trace = explorer.load(SLOW_LOADER)
    report = trace.report(step=2, top=3)
    doc = report.document
    assert [s["step"] for s in doc["steps"]] == [2]
    html = _html(report)
    assert f"1 step(s), mean {fmt_ns(doc['steps'][0]['dur_ns'])}" in html
    svg = _chart(html, "breakdown")
    assert svg.count("category:compute") >= 1
    assert str(report).startswith("Explorer report")
    assert report.render("markdown").lstrip().startswith("#")


def test_a_diff_shows_the_medians_the_chart_and_what_changed() -> None:
    d = explorer.diff(explorer.load(CNN), explorer.load(SLOW_LOADER))
    html = _html(d)
    _self_contained(html)
    a, b = (int(x) for x in d.steps["median_ns"])
    assert f"Median step {fmt_ns(a)} → {fmt_ns(b)} (+{fmt_ns(b - a)})" in html
    assert "Step time by category, before and after" in _chart(html, "diff")
    row = d.findings.set_index("kind").loc["input_stall"]
    assert row["status"] == "appeared"
    assert "<td>input_stall</td><td>appeared</td>" in html
    top = d.lines[d.lines["status"] != "same"].iloc[0]
    assert escape(f"{top.file}:{top.line} ({top.function})") in html
    assert str(d).startswith("explorer diff")


def test_a_diff_of_two_real_gpu_traces(shared_traces: Path) -> None:
    d = explorer.diff(
        explorer.load(shared_traces / "trace_compare__base__base.json.gz"),
        explorer.load(shared_traces / "trace_compare__test__test.json.gz"),
    )
    html = _html(d)
    for note in d.notes:
        assert escape(note) in html
    svg = _chart(html, "diff")
    assert "a (before)" in svg and "b (after)" in svg


@pytest.fixture(scope="module")
def sample_job(tmp_path_factory: pytest.TempPathFactory) -> Job:
    """The sample 4-rank job, analysed once for this module (a Dask cluster per job)."""
    store = tmp_path_factory.mktemp("job-store")
    return explorer.load_job(SAMPLE_TRACES / "ddp_4rank_slow_input", workers=2, store=store)


@pytest.mark.slow  # the sample job, analysed on a Dask cluster
def test_a_job_shows_the_straggler_its_line_and_the_heatmap(sample_job: Job) -> None:
    job = sample_job
    doc = job.document
    m = job.step_matrix
    assert list(m.index) == sorted(int(r) for r in doc["step_matrix"])
    assert list(m.columns) == doc["steps"]
    for r in m.index:
        assert list(m.loc[r]) == doc["step_matrix"][str(r)]
    html = _html(job)
    _self_contained(html)
    s = doc["straggler"]
    assert s is not None and f"Why rank {s['rank']} is late" in html
    for c in s["causes"]:
        assert escape(f"{c['file']}:{c['line']} ({c['function']})") in html
    svg = _chart(html, "heatmap")
    assert f"rank {s['rank']} (straggler)" in svg
    assert list(job.ranks["rank"]) == [r["rank"] for r in doc["ranks"]]
    assert str(job).startswith("Explorer job report")


def test_without_matplotlib_a_trace_shows_everything_but_the_chart() -> None:
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "import explorer\n"
        "print(explorer.load(sys.argv[1])._repr_html_())\n"
    )
    html = subprocess.run(
        [sys.executable, "-c", code, str(SLOW_LOADER)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    assert "<svg" not in html
    assert escape(f"(No breakdown chart: {MISSING}.)") in html
    assert "Input stall" in html


@pytest.mark.parametrize("name", ["amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
                                  "mtia_inference_trace__mtia_inference_rank_0.json.gz"])  # fmt: skip
def test_real_accelerator_traces_display(shared_traces: Path, name: str) -> None:
    trace = explorer.load(shared_traces / name)
    html = _html(trace)
    doc = trace.report().document
    dev = next(iter(doc["steps"][0]["breakdown"]))
    assert f"Step time by category — {dev}" in _chart(html, "breakdown")
    for f in doc["findings"]:
        assert escape(f["title"]) in html


def test_the_displayed_chart_draws_the_breakdown_the_analysis_returns() -> None:
    trace = explorer.load(SLOW_LOADER)
    bd, steps = report_breakdown(trace.report().document)
    want = trace.breakdown()
    pd.testing.assert_frame_equal(
        bd.astype({"category": str, "ns": "int64", "step": "int64"}),
        want.astype({"category": str}),
    )
    assert list(steps["step"]) == list(trace.steps()["step"])


def test_no_findings_say_what_was_looked_for() -> None:
    trace = explorer.load(CNN)
    found = trace.findings()
    assert found == []
    html = _html(found)
    assert "Findings (0, ranked by time lost)" in html
    assert escape(trace.report().document["no_finding"]) in html
    assert "No problem found" in html


def test_a_window_of_steps_shows_those_steps() -> None:
    window = explorer.load(SLOW_LOADER).window_of_steps(1, 2)
    doc = window.report().document
    assert [s["step"] for s in doc["steps"]] == [1, 2]
    html = _html(window)
    assert f"2 step(s), mean {fmt_ns(doc['summary']['mean_step_ns'])}" in html
    assert "Step time by category — host" in _chart(html, "breakdown")


@pytest.mark.slow  # the sample job, analysed on a Dask cluster
def test_job_heatmap_is_the_job_reports_step_matrix(sample_job: Job) -> None:
    doc = copy.deepcopy(sample_job.document)
    fig = sample_job.plot.heatmap()
    ax = fig.axes[0]
    (image,) = ax.get_images()
    cells = np.ma.filled(image.get_array(), np.nan)
    ranks = sorted(int(r) for r in doc["step_matrix"])
    assert cells.shape == (len(ranks), len(doc["steps"])) == (4, 5)
    scale, _ = time_unit(max(v for row in doc["step_matrix"].values() for v in row if v))
    want = np.array([doc["step_matrix"][str(r)] for r in ranks], dtype=float)
    np.testing.assert_allclose(cells * scale, want, rtol=1e-12)
    straggler = doc["straggler"]["rank"]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[ranks.index(straggler)] == f"rank {straggler} (straggler)"
    assert sum("straggler" in x for x in labels) == 1
    # A rank that lacks a step (a rank file cut short) is a blank cell, not a zero.
    doc["step_matrix"][str(ranks[0])][-1] = None
    cells = np.ma.getmaskarray(JobPlots(doc).heatmap().axes[0].get_images()[0].get_array())
    assert cells.sum() == 1 and cells[0, -1]
