"""The report in four formats, on synthetic scenarios written to disk and read back (so the
SYNTHETIC label travels through the file) — the formats agree with the analyses."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import explorer
from explorer.analysis.breakdown import CATEGORIES
from explorer.errors import UsageError
from explorer.report import SCHEMA_VERSION, document, render
from explorer.scenarios import write


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, explorer.Trace]:
    d = tmp_path_factory.mktemp("scenarios")
    names = ("input_stall", "memory_growth", "clean")
    return {n: explorer.load(write(n, d / f"{n}.json.gz", steps=6)) for n in names}


def test_json_follows_the_schema_and_matches_the_analyses(traces: dict) -> None:
    t = traces["input_stall"]
    doc = json.loads(render(t, "json"))
    assert doc["schema_version"] == SCHEMA_VERSION == 2
    assert doc["synthetic"] is True and doc["categories"] == list(CATEGORIES)
    st = t.steps()
    assert [s["step"] for s in doc["steps"]] == st["step"].tolist()
    bd = t.breakdown()
    for s in doc["steps"]:
        assert set(s) == {"step", "name", "start_ns", "dur_ns", "partial", "partial_reason",
                          "breakdown"}  # fmt: skip
        assert s["partial"] is False and s["partial_reason"] == ""  # a whole simulated run
        for dev, cats in s["breakdown"].items():
            assert list(cats) == list(CATEGORIES) and sum(cats.values()) == s["dur_ns"]
            rows = bd[(bd["step"] == s["step"]) & (bd["device"] == dev)]
            assert dict(zip(rows["category"].astype(str), rows["ns"].tolist(), strict=True)) == cats
    (f,) = doc["findings"]
    want = t.findings(predict=True)[0].to_dict()  # the report's: with what the fix saves
    assert f == json.loads(json.dumps(want))
    assert t.findings()[0].predicted_saving_ns is None  # predicting leaves the kept ones be
    keys = {"kind", "title", "time_lost_ns", "share", "steps", "ranges", "evidence", "source_lines",
            "explanation", "recommendation"}  # fmt: skip
    assert keys <= set(f)
    assert doc["summary"]["time_lost_by_kind"] == {"input_stall": f["time_lost_ns"]}


def test_text_is_aligned_labelled_and_coloured_only_when_asked(traces: dict) -> None:
    t = traces["input_stall"]
    plain = render(t, "text")
    assert plain.startswith("*** SYNTHETIC TRACE")
    assert "\x1b[" not in plain
    assert "[input_stall]" in plain and "/synthetic/train.py:20" in plain
    rows = [
        ln
        for ln in plain.splitlines()
        if re.match(r"^  cuda:0 +(compute|data movement|host-bound idle) ", ln)
    ]
    assert len(rows) == 3 and len({ln.index("%") for ln in rows}) == 1  # percentages line up
    coloured = render(t, "text", color=True)
    assert "\x1b[" in coloured and re.sub(r"\x1b\[[0-9;]*m", "", coloured) == plain


def test_markdown_and_html_say_synthetic_and_hold_the_finding(traces: dict) -> None:
    t = traces["input_stall"]
    md = render(t, "markdown")
    assert "SYNTHETIC TRACE" in md and "`input_stall`" in md and "| compute |" in md
    html = render(t, "html")
    assert "SYNTHETIC TRACE" in html and "input_stall" in html
    # self-contained: no script, no external stylesheet or image
    assert "<script" not in html and not re.search(r"(src|href)=['\"]?https?:", html)
    assert html.count("<rect") >= 6  # stacked bars for every step


def test_html_plots_memory_over_time_when_the_trace_has_memory(traces: dict) -> None:
    html = render(traces["memory_growth"], "html")
    assert "Memory over time" in html and "<polyline" in html
    doc = document(traces["memory_growth"])
    peaks = {p["device"]: p["peak_bytes"] for p in doc["memory"]["peaks"]}
    assert peaks["cuda:0"] > peaks.get("cpu", 0) > 0  # the leak is on the device
    (gpu,) = [p for p in doc["memory"]["peaks"] if p["device"] == "cuda:0"]
    holder = gpu["top"][0]  # what holds most at the peak: the clones kept every step
    assert (holder["op"], holder["file"], holder["line"]) == (
        "aten::clone",
        "/synthetic/train.py",
        102,
    )
    assert "aten::clone" in render(traces["memory_growth"], "text").split("Memory")[-1]
    assert [f["kind"] for f in doc["findings"]] == ["memory"]


def test_clean_report_says_no_problem(traces: dict) -> None:
    assert "No problem found" in render(traces["clean"], "text")
    assert json.loads(render(traces["clean"], "json"))["findings"] == []


def test_no_finding_quotes_the_thresholds_the_detectors_use(
    traces: dict, sample_traces: Path
) -> None:
    """Every format says what "no problem" meant, from the detectors' own constants: 2% on a
    GPU trace (5% for launch-bound), 10% for an input stall on a CPU-only trace."""
    from explorer.analysis.detectors import input_stall, launch_bound
    from explorer.analysis.detectors.context import MIN_SHARE

    gpu = document(traces["clean"])["no_finding"]
    assert f"≥ {100 * MIN_SHARE:g}% of the step time" in gpu
    assert f"launch bound: ≥ {100 * launch_bound.MIN_LAUNCH_SHARE:g}%" in gpu
    cpu_path = sample_traces / "cpu_cnn.pt.trace.json.gz"
    if not cpu_path.exists():
        pytest.skip(f"{cpu_path} is not there")
    cpu = document(explorer.load(cpu_path))["no_finding"]
    assert f"input stall: ≥ {100 * input_stall.HOST_MIN_SHARE:g}%" in cpu
    assert "launch bound" not in cpu  # no launches on the CPU
    for fmt in ("text", "markdown", "html"):
        assert gpu in render(traces["clean"], fmt)


def test_step_and_top_options(traces: dict) -> None:
    t = traces["input_stall"]
    doc = document(t, step=2, top=1)
    assert [s["step"] for s in doc["steps"]] == [2] and doc["selected_step"] == 2
    assert doc["summary"]["total_ns"] == doc["steps"][0]["dur_ns"]
    (f,) = doc["findings"]
    whole = t.findings()[0]  # the trace's own finding stays whole-trace
    assert (
        f["steps"] == [2]
        and f["time_lost_ns"] == whole.details["per_step_ns"][2] < whole.time_lost_ns
    )
    assert f["share"] == pytest.approx(f["time_lost_ns"] / doc["steps"][0]["dur_ns"])
    assert doc["summary"]["time_lost_by_kind"] == {"input_stall": f["time_lost_ns"]}
    assert sum(whole.details["per_step_ns"].values()) == whole.time_lost_ns
    assert len(document(t, top=1)["by_source"]) <= 1
    with pytest.raises(UsageError):
        render(t, "pdf")
    with pytest.raises(UsageError, match="step 99"):
        render(t, "text", step=99)


def test_report_module_renders_without_analysis_in_renderers() -> None:
    """Renderers format the document only: none of them imports an analysis."""
    from explorer.report.formats import FORMATS

    pkg = Path(explorer.__file__).parent / "report" / "formats"
    modules = sorted(p.name for p in pkg.glob("*.py") if p.name != "__init__.py")
    assert len(modules) == len(FORMATS) == 4  # one module per format, each registered
    for name in [*modules, "__init__.py", "../document.py"]:
        src = (pkg / name).read_text()
        assert "explorer.analysis" not in src, name


def test_report_colours_are_the_palettes(traces: dict) -> None:
    """HTML and terminal reports colour categories from explorer.palette (the viewer's)."""
    from explorer.palette import CATEGORY_COLORS, CRITICAL_PATH_COLORS
    from explorer.report.critical_path_section import LABELS as PATH_LABELS
    from explorer.report.formats.text import CATEGORY_COLOURS
    from explorer.report.sections import LABELS

    html = render(traces["input_stall"], "html")
    for cat, colour in CATEGORY_COLORS.items():
        assert f"background:{colour}'></i>{LABELS[cat]}" in html
    # the critical-path section: every category row it lists, in the palette's colour
    path_html = html.split("<section id='critical_path'>")[1]
    path_rows = re.findall(r"background:(#[0-9a-f]{6})'></i> ([^<]+)</td>", path_html)
    path_labels = {label: cat for cat, label in PATH_LABELS.items()}
    assert path_rows and {path_labels[label] for _, label in path_rows} == set(CRITICAL_PATH_COLORS)
    for colour, label in path_rows:
        assert colour == CRITICAL_PATH_COLORS[path_labels[label]], label
    levels = [0, 95, 135, 175, 215, 255]  # xterm's 6x6x6 cube (codes 16-231)
    cube = {16 + 36 * r + 6 * g + b: (levels[r], levels[g], levels[b])
            for r in range(6) for g in range(6) for b in range(6)}  # fmt: skip
    for cat, colour in CATEGORY_COLORS.items():
        rgb = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
        nearest = min(
            cube, key=lambda k: sum((x - y) ** 2 for x, y in zip(cube[k], rgb, strict=True))
        )
        assert cube[CATEGORY_COLOURS[cat]] == cube[nearest], cat


def test_a_field_added_to_a_finding_shows_in_every_format(traces: dict) -> None:
    """The document's construction is open to data other analyses add: the what-if
    replay's predicted saving on a finding shows in every format with its note, and the
    JSON keeps it as it is."""
    from explorer.report import render_document

    doc = document(traces["input_stall"])
    lost = doc["findings"][0]["time_lost_ns"]
    doc["findings"][0]["predicted_saving_ns"] = lost // 3
    doc["findings"][0]["predicted_note"] = "a planted note"
    from explorer.units import fmt_ns

    for fmt in ("text", "markdown", "html"):
        out = render_document(doc, fmt)
        assert f"{fmt_ns(lost // 3)} (a planted note)" in out, fmt
    assert json.loads(render_document(doc, "json"))["findings"][0]["predicted_saving_ns"] == (
        lost // 3
    )
