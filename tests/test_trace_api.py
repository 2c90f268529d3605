"""``explorer.Trace`` wraps the model by composition: loaders return ``TraceData``, the
façade holds it, and everything the model offers reads through unchanged."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import subprocess
import sys

import pandas as pd
import pytest

import explorer
from explorer.analysis.steps import steps
from explorer.readers import read as load_trace
from explorer.readers import read_ranks as load_rank_traces
from explorer.trace import trace_from_events
from explorer.trace.model import TraceData
from tests.conftest import ROOT, SAMPLE_TRACES

TRACE = SAMPLE_TRACES / "cpu_slow_dataloader.pt.trace.json.gz"


def test_loaders_return_the_model_and_load_wraps_it() -> None:
    assert type(load_trace(TRACE)) is TraceData
    assert type(trace_from_events([{"ph": "X", "name": "a", "ts": 0, "dur": 1}])) is TraceData
    assert all(type(t) is TraceData for t in load_rank_traces(SAMPLE_TRACES).values())
    t = explorer.load(TRACE)
    assert type(t) is explorer.Trace and type(t.data) is TraceData
    assert all(type(r) is explorer.Trace for r in explorer.load_ranks(SAMPLE_TRACES).values())


def test_every_public_member_of_the_model_reads_through() -> None:
    """A member added to the model later and forgotten here fails this test."""
    t = explorer.load(TRACE)
    members = {f.name for f in dataclasses.fields(TraceData) if not f.name.startswith("_")} | {
        n for n, _ in inspect.getmembers(TraceData) if not n.startswith("_")
    }
    for name in sorted(members):
        mine, theirs = getattr(t, name), getattr(t.data, name)
        if callable(theirs):
            assert callable(mine), name
        elif isinstance(theirs, (pd.DataFrame, dict)) or theirs is None:
            assert mine is theirs, name  # the same object, not a copy
        else:
            assert mine == theirs, name
    assert len(t) == len(t.data) and t.args(5) == t.data.args(5) and t.stack(5) == t.data.stack(5)
    with pytest.raises(AttributeError):
        t.slices = t.slices.head()  # the façade holds no state of its own
    with pytest.raises(AttributeError):
        t._private  # noqa: B018


def test_analysis_methods_run_on_the_model() -> None:
    t = explorer.load(TRACE)
    pd.testing.assert_frame_equal(t.steps(), steps(load_trace(TRACE)))
    assert [f.kind for f in t.findings()] == ["input_stall"]


def test_report_still_has_the_critical_path() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "explorer", "report", str(TRACE), "--format", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr
    cp = json.loads(out.stdout)["critical_path"]
    assert "error" not in cp and cp["length_ns"] > 0 and cp["slices"]
