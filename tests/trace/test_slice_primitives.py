"""The model's one home for "where does this slice run", "inherit from the parent" and
"does its name match", checked against brute force on real traces."""

from __future__ import annotations

import re

import numpy as np
import pytest

import explorer
from explorer.analysis.attribution import launcher
from explorer.analysis.dependency_graph import dependency_graph
from explorer.analysis.operators import operator_stats
from explorer.trace.model import DEVICE, HOST, OTHER
from tests.conftest import SAMPLE_TRACES, shared_trace_files

TRACES = sorted(SAMPLE_TRACES.glob("*.json.gz")) + [
    p for p in shared_trace_files() if p.stat().st_size < 8_000_000
]
PROFILER_SPAN = re.compile(r"^PyTorch Profiler \(\d+\)$")


@pytest.fixture(scope="module", params=TRACES, ids=lambda p: p.name)
def trace(request: pytest.FixtureRequest) -> explorer.Trace:
    return explorer.load(request.param)


def test_sides_follow_the_track_types(trace: explorer.Trace) -> None:
    sides = trace.sides()
    track_type = trace.tracks.set_index("id")["type"].astype(str)
    per_slice = track_type.reindex(trace.slices["track"].to_numpy()).to_numpy()
    assert np.array_equal(sides == DEVICE, per_slice == "device_stream")
    assert np.array_equal(sides == HOST, per_slice == "host_thread")
    assert not sides.flags.writeable  # shared by every analysis: nobody may change it


def test_the_profilers_own_span_is_neither_host_nor_device(trace: explorer.Trace) -> None:
    span = np.array([bool(PROFILER_SPAN.match(str(n))) for n in trace.slices["name"]])
    assert (trace.sides()[span] == OTHER).all()
    assert not (trace.on_host() & span).any()
    # ...and the operators table files it under "other", not under host time
    ops = operator_stats(trace)
    spans = ops[ops["name"].astype(str).str.match(PROFILER_SPAN.pattern)]
    assert set(spans["side"].astype(str)) <= {"other"}


def _ancestors(parent: np.ndarray, i: int) -> list[int]:
    out = []
    while parent[i] >= 0:
        i = int(parent[i])
        out.append(i)
    return out


def test_inherit_down_equals_walking_the_parent_chain(trace: explorer.Trace) -> None:
    s = trace.slices
    rng = np.random.default_rng(0)
    keep = rng.random(len(s)) < 0.3
    values = np.arange(len(s), dtype=np.int64)
    got = trace.inherit_down(values, keep)
    parent = s["parent"].to_numpy(np.int64)
    for i in rng.choice(len(s), size=min(len(s), 2000), replace=False):
        chain = [int(i), *_ancestors(parent, int(i))]
        owner = next((j for j in chain if keep[j]), chain[-1])
        assert got[i] == owner, i


def test_name_matches_equals_one_regex_per_row(trace: explorer.Trace) -> None:
    rx = re.compile(r"aten::(add|mm)|Memcpy|^ProfilerStep#\d+$", re.I)
    expect = np.array([bool(rx.search(str(n))) for n in trace.slices["name"]], bool)
    assert np.array_equal(trace.name_matches(rx), expect)


def test_the_graph_launches_are_the_one_launcher(trace: explorer.Trace) -> None:
    src = launcher(trace)
    edges = dependency_graph(trace).edges
    launch = edges[edges["type"].astype(str) == "launch"]
    assert np.array_equal(src[launch["dst"].to_numpy()], launch["src"].to_numpy())
    flows = trace.flows[trace.flows["type"].astype(str) == "launch"]
    flows = flows.drop_duplicates("dst", keep=False)  # an op with one launch flow
    assert np.array_equal(src[flows["dst"].to_numpy()], flows["src"].to_numpy())
