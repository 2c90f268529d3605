"""One answer per question: the same figure through every way out of Explorer agrees.

For a sample trace and shared ones (an AMD GPU trace; the before/after pair for diff), as a
user runs them: ``explorer report --format
json``, ``explorer sql`` over the ``steps`` and ``findings`` tables, ``explorer diff`` of the
trace with itself (and of the shared before/after pair), ``explorer export`` (Chrome JSON:
the Findings track), and the viewer's panels' data (the analyses the window shows, run
headless as its screenshot mode runs them).
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest

import explorer
from tests.conftest import SAMPLE_TRACES, SHARED_TRACES
from tests.peers.conftest import trace_params

TRACES = [SAMPLE_TRACES / "cpu_slow_dataloader.pt.trace.json.gz"]
TRACES += [SHARED_TRACES / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"]
PAIR = (
    SHARED_TRACES / "trace_compare__base__base.json.gz",
    SHARED_TRACES / "trace_compare__test__test.json.gz",
)


def cli(*args: object) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "explorer", *map(str, args)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


@cache
def report(path: Path) -> dict:
    return json.loads(cli("report", path, "--format", "json"))


@cache
def sql(path: Path, query: str) -> list[dict]:
    return json.loads(cli("sql", path, query, "--format", "json"))


@cache
def self_diff(path: Path) -> dict:
    return json.loads(cli("diff", path, path, "--format", "json"))


@cache
def viewer(path: Path) -> dict:
    from explorer.ui.loader import run_analyses_now

    results, errors = run_analyses_now(explorer.load(path))
    assert not errors, errors
    return results


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("export")

    @cache
    def get(path: Path) -> list[dict]:
        target = out / (path.name.removesuffix(".json.gz") + ".json")
        cli("export", path, "-o", target)
        return json.loads(target.read_text())["traceEvents"]

    return get


def _steps(doc: dict) -> list[tuple[int, int, int]]:
    return [(s["step"], s["start_ns"], s["dur_ns"]) for s in doc["steps"]]


def _whole(doc: dict) -> list[dict]:
    """The steps every summary counts: partial ones (cut, or the profiler stopped in them)
    are listed but left out of totals, means and medians, in every verb alike."""
    return [s for s in doc["steps"] if not s["partial"]]


@pytest.mark.parametrize("trace_path", trace_params(TRACES), indirect=True)
def test_step_times_agree(trace_path: Path) -> None:
    doc = report(trace_path)
    ours = _steps(doc)
    assert ours
    rows = sql(trace_path, "SELECT step, start_ns, dur_ns FROM steps ORDER BY start_ns")
    assert [(r["step"], r["start_ns"], r["dur_ns"]) for r in rows] == ours, "sql steps"
    st = viewer(trace_path)["steps"]
    assert list(zip(st["step"], st["start_ns"], st["dur_ns"], strict=True)) == ours, "viewer"
    durs = np.array([s["dur_ns"] for s in _whole(doc)])
    assert doc["summary"]["total_ns"] == durs.sum()
    assert doc["summary"]["mean_step_ns"] == pytest.approx(durs.mean(), abs=1)
    side = self_diff(trace_path)["steps"][0]
    assert side["steps"] == len(durs)
    assert side["median_ns"] == round(float(np.median(durs))), "diff's median step"


@pytest.mark.parametrize("trace_path", trace_params(TRACES), indirect=True)
def test_breakdown_totals_agree(trace_path: Path) -> None:
    doc = report(trace_path)
    per_step = {s["step"]: s["breakdown"] for s in doc["steps"]}
    bd = viewer(trace_path)["breakdown"]
    for step, devices in per_step.items():
        dur = next(s["dur_ns"] for s in doc["steps"] if s["step"] == step)
        for device, cats in devices.items():
            assert sum(cats.values()) == dur, f"step {step} {device} does not add up"
            assert all(v >= 0 for v in cats.values())
            mine = bd[(bd["step"] == step) & (bd["device"] == device)]
            assert dict(zip(mine["category"].astype(str), mine["ns"], strict=True)) == cats
    whole = [s["step"] for s in _whole(doc)]
    for device, cats in doc["summary"]["breakdown"].items():
        for cat, ns in cats.items():
            assert ns == sum(per_step[s][device][cat] for s in whole), (device, cat)
    # diff: per category the median over whole steps (of the mean over devices)
    medians = {
        c: float(np.median([np.mean([d[c] for d in per_step[s].values()]) for s in whole]))
        for c in doc["categories"]
    }
    for row in self_diff(trace_path)["breakdown"]:
        assert row["a_ns"] == pytest.approx(medians[row["category"]], abs=1), row["category"]


@pytest.mark.parametrize("trace_path", trace_params(TRACES), indirect=True)
def test_finding_counts_agree(trace_path: Path, exported) -> None:
    doc = report(trace_path)
    lost = {f["kind"]: 0 for f in doc["findings"]}
    for f in doc["findings"]:
        lost[f["kind"]] += f["time_lost_ns"]
    assert doc["findings_total"] == len(doc["findings"])  # at most --top 10 here
    rows = sql(trace_path, "SELECT kind, time_lost_ns FROM findings")
    assert len(rows) == doc["findings_total"], "sql findings"
    assert sorted((r["kind"], r["time_lost_ns"]) for r in rows) == sorted(
        (f["kind"], f["time_lost_ns"]) for f in doc["findings"]
    )
    found = viewer(trace_path)["findings"]
    assert len(found) == doc["findings_total"], "viewer findings"
    track = [e for e in exported(trace_path) if e.get("tid") == "Findings" and e.get("ph") == "X"]
    assert len(track) == doc["findings_total"], "export's Findings track"
    assert sorted(e["args"]["kind"] for e in track) == sorted(lost)
    diffed = self_diff(trace_path)["findings"]
    assert len(diffed) == doc["findings_total"], "diff findings"
    assert all(r["status"] == "same" and r["delta_ns"] == 0 for r in diffed)


def test_diff_and_report_give_the_same_step_time(shared_traces: Path) -> None:
    """The shared before/after pair: diff's median step per side is each report's."""
    a, b = PAIR
    d = json.loads(cli("diff", a, b, "--format", "json"))
    for side, path in zip(d["steps"], PAIR, strict=True):
        doc = report(path)
        durs = [s["dur_ns"] for s in _whole(doc)]
        assert doc["summary"]["median_step_ns"] == round(float(np.median(durs)))
        assert side["median_ns"] == round(float(np.median(durs))), (
            f"{path.name}: diff's median step {side['median_ns'] / 1e6:.1f} ms, the report's "
            f"steps give {np.median(durs) / 1e6:.1f} ms"
        )
