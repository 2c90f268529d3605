"""A report of some steps only: a window of the trace, analysed on its own.

The window's steps must have the whole trace's answers — each step's breakdown and critical
path, computed on the whole trace, are what the window gives — and what a user clicks
(evidence, the path's slices) must name the whole trace's slices. Under a memory limit the
whole trace's analyses would not fit in, ``report`` analyses the steps that fit and says so.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import explorer
from explorer.analysis.attribution import frame_codes
from explorer.analysis.breakdown import breakdown
from explorer.analysis.by_source import by_source
from explorer.analysis.critical_path import SCIPY_INIT_BYTES, critical_path
from explorer.analysis.findings import findings
from explorer.analysis.memory_need import MEASURED_BYTES_PER_SLICE
from explorer.analysis.steps import attributed_steps, window_of_steps
from explorer.errors import UsageError
from explorer.scenarios.large import write_large
from explorer.trace.model import TraceData
from tests.conftest import (
    ROOT,
    SAMPLE_TRACES,
    run_script,
    run_with_data_limit,
    shared_trace_files,
)

#: Every trace here with two steps or more (the shared ones only where ../shared exists).
TRACES = [
    *sorted(SAMPLE_TRACES.glob("*.json.gz")),
    *sorted(SAMPLE_TRACES.glob("ddp_*/rank0.pt.trace.json.gz")),
    *[
        p
        for p in shared_trace_files()
        if p.name.startswith(("amd_trace", "nccl_parser", "timeline_analysis", "trace_compare"))
    ],
]


def _inner_steps(t: explorer.Trace) -> list[int]:
    numbers = [int(x) for x in attributed_steps(t.data)["step"]]
    assert len(numbers) >= 2, "every trace here has two steps or more"
    return numbers[1:-1] if len(numbers) >= 3 else numbers[1:]


@pytest.mark.slow
@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_a_window_of_steps_has_the_whole_traces_breakdown_and_critical_path(path: Path) -> None:
    t = explorer.load(path)
    inner = _inner_steps(t)
    w = window_of_steps(t.data, inner[0], inner[-1], "requested")
    assert w.window is not None and len(w.slices) < len(t.slices)
    whole = breakdown(t.data)
    whole = whole[whole["step"].isin(inner)].reset_index(drop=True)
    pd.testing.assert_frame_equal(breakdown(w).reset_index(drop=True), whole)
    for step in inner:
        cw, cf = critical_path(w, step), critical_path(t.data, step)
        assert cw.length_ns == cf.length_ns
        assert w.window.whole_ids(cw.slices) == [int(i) for i in cf.slices]
        pd.testing.assert_frame_equal(cw.summary, cf.summary)


@pytest.mark.parametrize("path", TRACES[:3], ids=lambda p: p.name)
def test_a_windows_rows_are_the_whole_traces_rows(path: Path) -> None:
    """Every kept slice has the whole trace's values, its parent is kept, and its args are
    its own: the window renumbers, it does not change."""
    t = explorer.load(path)
    inner = _inner_steps(t)
    w = window_of_steps(t.data, inner[0], inner[-1], "requested")
    assert w.window is not None
    ids = w.window.ids
    whole = t.slices.iloc[ids].reset_index(drop=True)
    for col in ("ts", "dur", "name", "kind", "track", "depth"):
        assert w.slices[col].tolist() == whole[col].tolist()
    parent = w.slices["parent"].to_numpy()
    assert (parent >= -1).all()
    assert ids[parent[parent >= 0]].tolist() == whole["parent"].to_numpy()[parent >= 0].tolist()
    assert (whole["parent"].to_numpy()[parent < 0] == -1).all()  # no parent was lost
    for i in range(0, len(ids), max(len(ids) // 50, 1)):
        assert w.args(i) == t.args(int(ids[i]))
    src, dst = w.flows["src"].to_numpy(), w.flows["dst"].to_numpy()
    pairs = set(zip(ids[src].tolist(), ids[dst].tolist(), strict=True))
    f = t.flows
    assert pairs <= set(zip(f["src"].tolist(), f["dst"].tolist(), strict=True))


def test_a_windows_findings_name_slices_of_the_whole_trace(sample_traces: Path) -> None:
    from explorer.report import document

    t = explorer.load(sample_traces / "cpu_slow_dataloader.pt.trace.json.gz")
    inner = _inner_steps(t)
    w = window_of_steps(t.data, inner[0], inner[-1], "requested")
    assert w.window is not None
    found = findings(w)
    assert found, "the slow data loader is found within the window's steps too"
    doc = document(w)
    for f, d in zip(found, doc["findings"], strict=False):
        assert d["evidence"] == w.window.whole_ids(f.evidence)
        names_w = [str(w.slices["name"].iat[i]) for i in f.evidence]
        names_t = [str(t.slices["name"].iat[i]) for i in d["evidence"]]
        assert names_w == names_t
    assert doc["window"]["first_step"] == inner[0] and doc["window"]["last_step"] == inner[-1]
    assert doc["window"]["whole_slices"] == len(t.slices)


def _brute_exclusive_host_ns(w: TraceData) -> dict[int, int]:
    """Per frame code, the window's host time whose deepest running slice has that code:
    elementary segments between all boundaries, one at a time (small traces only)."""
    assert w.window is not None
    code, _ = frame_codes(w)
    s = w.slices
    host = w.on_host()
    lo, hi = w.window.start_ns, w.window.end_ns
    out: dict[int, int] = {}
    for track in np.unique(s["track"].to_numpy()[host]):
        rows = np.flatnonzero(host & (s["track"].to_numpy() == track))
        a = np.clip(s["ts"].to_numpy()[rows], lo, hi)
        b = np.clip(s["ts"].to_numpy()[rows] + s["dur"].to_numpy()[rows], lo, hi)
        depth = s["depth"].to_numpy()[rows]
        cuts = np.unique(np.concatenate([a, b]))
        for x, y in zip(cuts[:-1], cuts[1:], strict=True):
            on = np.flatnonzero((a <= x) & (b >= y) & (b > a))
            if len(on) == 0:
                continue
            deepest = rows[on[np.argmax(depth[on])]]
            if code[deepest] >= 0:
                out[int(code[deepest])] = out.get(int(code[deepest]), 0) + int(y - x)
    return out


def test_a_windows_source_lines_count_only_the_time_inside_it(sample_traces: Path) -> None:
    """The slices enclosing the window (the training loop's frames) keep their whole
    durations; only their time inside the window is the window's."""
    t = explorer.load(sample_traces / "cpu_cnn.pt.trace.json.gz")
    inner = _inner_steps(t)
    w = window_of_steps(t.data, inner[0], inner[0], "requested")
    assert w.window is not None
    rows = by_source(w)
    _, frames = frame_codes(w)
    brute = _brute_exclusive_host_ns(w)
    got = {
        int(np.flatnonzero((frames["file"] == r.file) & (frames["line"] == r.line))[0]): int(
            r.host_ns
        )
        for r in rows.itertuples()
        if r.host_ns
    }
    assert got == brute
    assert sum(got.values()) <= w.window.end_ns - w.window.start_ns  # one host thread here


def test_a_window_of_no_step_is_refused_in_one_line(sample_traces: Path) -> None:
    t = explorer.load(sample_traces / "cpu_cnn.pt.trace.json.gz")
    with pytest.raises(UsageError, match="no step from 900 to 901"):
        window_of_steps(t.data, 900, 901, "requested")


def _explorer(args: list[str], env: dict[str, str], limit: int | None = None):
    return run_with_data_limit([sys.executable, "-m", "explorer", *args], env, limit)


def test_report_step_range_on_the_command_line(sample_traces: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    trace = sample_traces / "cpu_item_every_step.pt.trace.json.gz"
    whole = json.loads(_explorer(["report", "--format", "json", str(trace)], env).stdout)
    steps = [s["step"] for s in whole["steps"]]
    a, b = steps[1], steps[2]
    proc = _explorer(["report", "--format", "json", "--step-range", f"{a}:{b}", str(trace)], env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [s["step"] for s in doc["steps"]] == [a, b]
    assert doc["steps"] == [s for s in whole["steps"] if a <= s["step"] <= b]
    assert doc["window"]["reason"] == f"requested (--step-range {a}:{b})"
    text = _explorer(["report", "--step-range", f"{a}:{b}", str(trace)], env).stdout
    assert f"This report covers steps {a}-{b} only (2 of {len(steps)} steps" in text
    bad = _explorer(["report", "--step-range", "5:2", str(trace)], env)
    assert bad.returncode == 2 and "the last step comes before the first" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.fixture(scope="module")
def many_steps(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    d = tmp_path_factory.mktemp("window")
    trace = write_large(d / "steps.json", 400_000, scenario="input_sync_pageable")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EXPLORER_CACHE_DIR": str(d / "cache")}
    stored = _explorer(["info", "--json", str(trace)], env)
    assert stored.returncode == 0, stored.stderr
    return trace, env


#: What RLIMIT_DATA counts of a process that has opened the trace (from the store), under
#: a data-size limit too large to matter (a limit changes which allocator Arrow uses).
_DATA_AFTER_LOAD = (
    "import resource; resource.setrlimit(resource.RLIMIT_DATA, (1 << 40, 1 << 40)); "
    "import sys, explorer; from explorer.trace.memory_limits import _statm; "
    "t = explorer.load(sys.argv[1]); print(_statm()[1])"
)


def test_under_a_limit_the_report_covers_the_steps_that_fit(
    many_steps: tuple[Path, dict[str, str]],
) -> None:
    trace, env = many_steps
    whole = json.loads(_explorer(["report", "--format", "json", str(trace)], env).stdout)
    slices = whole["trace"]["slices"]
    # a quarter of what the whole trace's analyses need, with what the solver takes to start
    room = slices * MEASURED_BYTES_PER_SLICE // 4 + SCIPY_INIT_BYTES
    data = run_script(_DATA_AFTER_LOAD, trace, env=env)
    # The whole report, stored by the run above, is still the answer under the limit: read
    # back, nothing analysed, no window.
    again = _explorer(["report", "--format", "json", str(trace)], env, int(data) + room)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == whole
    assert "explorer: note:" not in again.stderr
    # Without it (another report's first run), the steps that fit are analysed.
    for stored in Path(env["EXPLORER_CACHE_DIR"]).glob("*/results"):
        shutil.rmtree(stored)
    proc = _explorer(["report", "--format", "json", str(trace)], env, int(data) + room)
    assert proc.returncode == 0, proc.stderr
    note = [ln for ln in proc.stderr.splitlines() if ln.startswith("explorer: note:")]
    assert len(note) == 1 and "(--step-range FIRST:LAST picks others)" in note[0]
    doc = json.loads(proc.stdout)
    win = doc["window"]
    assert win is not None and "more than this process may use (a data-size limit" in win["reason"]
    assert f"analysing steps {win['first_step']}-{win['last_step']} of" in note[0]
    assert win["first_step"] == whole["steps"][0]["step"]
    assert 1 <= win["steps"] < len(whole["steps"])
    assert win["whole_slices"] == slices
    assert doc["steps"] == whole["steps"][: win["steps"]]


#: Under a data-size limit too large to matter, what the analyses of a trace add to the
#: data size RLIMIT_DATA counts (reservations included), in bytes.
_DATA_GROWTH = r"""
import resource; resource.setrlimit(resource.RLIMIT_DATA, (1 << 40, 1 << 40))
import sys, explorer
from explorer.report import document
from explorer.trace.memory_limits import _statm
t = explorer.load(sys.argv[1])
before = _statm()[1]
document(t.data)
print(_statm()[1] - before)
"""


def test_under_a_limit_arrow_does_not_reserve_memory_nobody_uses(sample_traces: Path) -> None:
    """Arrow's default allocator reserves a 1 GB arena at first use (pandas' Arrow-backed
    string comparisons in the analyses use it), which a data-size limit counts in full."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ARROW_DEFAULT_MEMORY_POOL", None)
    grew = run_script(_DATA_GROWTH, str(sample_traces / "cpu_cnn.pt.trace.json.gz"), env=env)
    assert int(grew) < 256 << 20  # it was 1,061 MB with the arena


def test_a_windows_exported_results_name_slices_of_the_whole_trace(
    sample_traces: Path, tmp_path: Path
) -> None:
    from explorer.export.results import explorer_results

    t = explorer.load(sample_traces / "cpu_slow_dataloader.pt.trace.json.gz")
    inner = _inner_steps(t)
    w = window_of_steps(t.data, inner[0], inner[-1], "requested")
    assert w.window is not None
    mine = explorer_results(w)
    whole = mine.of_whole_trace(w.window)
    assert mine.slices and len(whole.slices) == len(mine.slices)
    names = t.slices["name"].astype(str).to_numpy()
    window_names = w.slices["name"].astype(str).to_numpy()
    for a, b in zip(mine.slices, whole.slices, strict=True):
        assert names[b.links].tolist() == window_names[a.links].tolist()
        assert b.args["analysed steps"].startswith(f"{inner[0]}-{inner[-1]} of ")
    # the path's runs are times and track labels, the same in the window and the whole
    pd.testing.assert_frame_equal(whole.path, mine.path)
    assert len(whole.path) and set(whole.path["on"]) <= set(t.tracks["label"].astype(str))
    span = w.slices["ts"].min(), (w.slices["ts"] + w.slices["dur"]).max()
    assert (
        span[0] <= whole.path["ts"].min()
        and (whole.path["ts"] + whole.path["dur"]).max() <= span[1]
    )
    src, dst = whole.flows["src"].to_numpy(), whole.flows["dst"].to_numpy()
    assert (src < len(t.slices)).all() and (dst < len(t.slices)).all()
    # and on the command line: the whole trace's events, with the window's findings
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "x.json"
    trace = sample_traces / "cpu_slow_dataloader.pt.trace.json.gz"
    proc = _explorer(
        ["export", str(trace), "-o", str(out), "--step-range", f"{inner[0]}:{inner[-1]}"], env
    )
    assert proc.returncode == 0, proc.stderr
    events = json.loads(out.read_text())["traceEvents"]
    found = [e for e in events if "analysed steps" in e.get("args", {})]
    assert [e["name"] for e in found] == [s.name for s in whole.slices]
    assert f"{len(t.slices):,} slices" in proc.stdout


def test_results_computed_in_a_child_process_are_those_computed_here(
    sample_traces: Path,
) -> None:
    from explorer.export.results import explorer_results, results_in_child

    t = explorer.load(sample_traces / "cpu_slow_dataloader.pt.trace.json.gz")
    inner = _inner_steps(t)
    w = window_of_steps(t.data, inner[0], inner[-1], "requested")
    here, there = explorer_results(w), results_in_child(w)
    assert there.slices == here.slices and here.slices
    pd.testing.assert_frame_equal(there.path, here.path)
    assert len(here.path)
    cols = ["src", "dst", "type"]
    pd.testing.assert_frame_equal(
        there.flows[cols].astype({"type": str}).reset_index(drop=True),
        here.flows[cols].astype({"type": str}).reset_index(drop=True),
    )


def test_under_a_limit_export_writes_the_findings_of_the_steps_that_fit(
    many_steps: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    trace, env = many_steps
    slices = int(json.loads(_explorer(["info", "--json", str(trace)], env).stdout)["slices"])
    room = slices * MEASURED_BYTES_PER_SLICE // 4 + SCIPY_INIT_BYTES
    data = run_script(_DATA_AFTER_LOAD, trace, env=env)
    out = tmp_path / "capped.json"
    proc = _explorer(["export", str(trace), "-o", str(out)], env, int(data) + room)
    assert proc.returncode == 0, proc.stderr
    assert "analysing steps 0-" in proc.stderr and f"{slices:,} slices" in proc.stdout
    events = json.loads(out.read_text())["traceEvents"]
    found = [e for e in events if "analysed steps" in e.get("args", {})]
    assert found and all(
        "more than this process may use" in e["args"]["analysed steps"] for e in found
    )


def test_a_notebook_takes_a_window_of_a_trace(sample_traces: Path) -> None:
    t = explorer.load(sample_traces / "cpu_item_every_step.pt.trace.json.gz")
    inner = _inner_steps(t)
    w = t.window_of_steps(inner[0], inner[-1])
    assert isinstance(w, explorer.Trace) and w.data.window is not None
    assert w.steps()["step"].tolist() == inner
    whole = t.breakdown()
    pd.testing.assert_frame_equal(
        w.breakdown().reset_index(drop=True),
        whole[whole["step"].isin(inner)].reset_index(drop=True),
    )
    with pytest.raises(UsageError, match="a window's steps are the whole trace's"):
        w.use_steps("ProfilerStep.*")
