"""Each synthetic scenario: the detectors find exactly the injected pathology, with the
time lost within 5% of what the simulator measured, in the right steps and at the right
line; the clean baseline yields no finding. (All traces here are synthetic.)"""

from __future__ import annotations

from typing import Any

import pytest

from explorer.analysis.findings import findings
from explorer.analysis.steps import select_steps
from explorer.scenarios import SCENARIOS, generate
from explorer.trace.build import trace_from_events
from explorer.trace_api import Trace


def _load(name: str, **kw: Any) -> tuple[Trace, dict]:
    doc = generate(name, **kw)
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    return Trace(trace_from_events(doc["traceEvents"], meta)), doc


INJECTED = [n for n in SCENARIOS if n != "clean"]


@pytest.mark.parametrize("name", INJECTED)
@pytest.mark.parametrize(
    "kw", [{"steps": 8, "seed": 0}, {"steps": 5, "seed": 3, "scale": 2}], ids=["base", "scaled"]
)
def test_finds_exactly_the_injected_pathology(name: str, kw: dict) -> None:
    trace, doc = _load(name, **kw)
    assert trace.synthetic
    (truth,) = doc["explorer_injected"]
    found = findings(trace)
    assert [f.kind for f in found] == [truth["kind"]], [(f.kind, f.time_lost_ns) for f in found]
    f = found[0]
    if truth["time_lost_ns"] == 0:  # memory: no time, but the leak's size and line
        assert f.time_lost_ns == 0
        per_step = f.details["per_step_bytes"]
        assert abs(per_step - truth["bytes_per_step"]) <= 0.05 * truth["bytes_per_step"]
        assert set(f.steps) <= set(truth["steps"])
    else:
        assert abs(f.time_lost_ns - truth["time_lost_ns"]) <= 0.05 * truth["time_lost_ns"]
        assert f.steps == truth["steps"]
        # a share of the steps' time, each step holding the device work it launched
        total = int(select_steps(trace, attributed=True)["dur_ns"].sum())
        assert f.share == pytest.approx(f.time_lost_ns / total)
    file, line = truth["source_line"]
    assert (file, line) == f.source_lines[0][:2]
    assert f.evidence and all(0 <= i < len(trace.slices) for i in f.evidence)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clean_baseline_has_no_finding(seed: int) -> None:
    trace, doc = _load("clean", steps=8, seed=seed)
    assert doc["explorer_injected"] == []
    assert findings(trace) == []
