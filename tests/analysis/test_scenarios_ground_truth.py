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


INJECTED = [n for n in SCENARIOS if len(SCENARIOS[n].truths) == 1]
SEVERAL = [n for n in SCENARIOS if len(SCENARIOS[n].truths) > 1]


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


@pytest.mark.parametrize("name", SEVERAL)
@pytest.mark.parametrize(
    "kw", [{"steps": 8, "seed": 0}, {"steps": 5, "seed": 3, "scale": 2}], ids=["base", "scaled"]
)
def test_several_pathologies_are_each_found_and_ranked_by_their_cost(name: str, kw: dict) -> None:
    """Two or three pathologies in every step: each is found with its own time (within 5% of
    what the simulator measured), at its own line, and the findings rank as the measured
    costs do — where two touch one instant, the breakdown gives it to one, not both."""
    trace, doc = _load(name, **kw)
    truths = sorted(doc["explorer_injected"], key=lambda e: -e["time_lost_ns"])
    assert len(truths) == len(SCENARIOS[name].truths) >= 2
    found = findings(trace)
    by_kind = {f.kind: f for f in found}
    for truth in truths:
        f = by_kind[truth["kind"]]
        assert abs(f.time_lost_ns - truth["time_lost_ns"]) <= 0.05 * truth["time_lost_ns"]
        assert f.steps == truth["steps"]
        assert tuple(truth["source_line"]) == f.source_lines[0][:2]
    injected = [f.kind for f in found if f.kind in {t["kind"] for t in truths}]
    assert injected == [t["kind"] for t in truths]
    # Anything else is a consequence, smaller than every injected cause: the stalls starve
    # compute, so the prefetch copy that compute used to hide runs alone.
    least = min(t["time_lost_ns"] for t in truths)
    for f in found:
        if f.kind in injected:
            continue
        assert f.time_lost_ns < least and f.share < 0.05, (f.kind, f.time_lost_ns)
    # nothing is counted twice: the findings' time fits in the steps
    total = int(select_steps(trace, attributed=True)["dur_ns"].sum())
    assert sum(f.time_lost_ns for f in found) <= total


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clean_baseline_has_no_finding(seed: int) -> None:
    trace, doc = _load("clean", steps=8, seed=seed)
    assert doc["explorer_injected"] == []
    assert findings(trace) == []
