"""The critical path: contiguous, made of graph edges, as long as its span, summarised
exactly — on every real trace — and on the right chain in synthetic device-bound and
host-bound steps built in memory (labelled synthetic below)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import explorer
from explorer.analysis.critical_path import CriticalPath, critical_path
from explorer.analysis.dependency_graph import dependency_graph
from explorer.analysis.graph.edges import PATH_CATEGORIES
from explorer.trace.build import trace_from_events
from explorer.trace_api import Trace


def check_path(trace, cp: CriticalPath) -> None:
    """The invariants the issue asks for, on any trace."""
    e = cp.edges
    graph = dependency_graph(trace, cp.step)
    if len(e) == 0:
        assert cp.length_ns == 0 or len(cp.slices) == 1
        return
    # Contiguous: each edge starts at the point where the previous one ended.
    assert (e["src"].to_numpy()[1:] == e["dst"].to_numpy()[:-1]).all()
    assert (e["src_point"].to_numpy()[1:] == e["dst_point"].to_numpy()[:-1]).all()
    # Every edge is an edge of the graph, with its type and weight.
    cols = ["src", "dst", "src_point", "dst_point", "type", "weight"]
    merged = e[cols].merge(graph.edges[cols], how="left", indicator=True)
    assert (merged["_merge"] == "both").all()
    # Its length is the span from its first point to its last, and the summary adds up.
    ts = trace.slices["ts"].to_numpy()
    end = ts + trace.slices["dur"].to_numpy()
    first = ts[e["src"].iat[0]] if e["src_point"].iat[0] == 0 else end[e["src"].iat[0]]
    last = ts[e["dst"].iat[-1]] if e["dst_point"].iat[-1] == 0 else end[e["dst"].iat[-1]]
    assert (cp.start_ns, cp.end_ns) == (first, last)
    assert cp.length_ns == last - first == int(e["weight"].sum())
    assert list(cp.summary["category"]) == list(PATH_CATEGORIES)
    assert int(cp.summary["ns"].sum()) == cp.length_ns
    assert (cp.summary["ns"] >= 0).all()
    # Slices in path order, each once, all graph nodes inside the window.
    assert len(np.unique(cp.slices)) == len(cp.slices)
    assert np.isin(cp.slices, graph.nodes).all()
    assert graph.window[0] <= cp.start_ns <= cp.end_ns
    assert (cp.top_ops["ns"].to_numpy() <= cp.length_ns).all()


def test_invariants_hold_on_every_real_trace(shared_traces: Path) -> None:
    from tests.conftest import shared_trace_files

    for path in shared_trace_files():
        trace = explorer.load(path)
        cp = critical_path(trace)
        check_path(trace, cp)
        for step in trace.steps()["step"].tolist()[:3]:
            if trace.steps()["slice"].iat[0] >= 0:
                check_path(trace, critical_path(trace, step))
        d = cp.to_dict()
        assert d["length_ns"] == cp.length_ns and sum(d["summary"].values()) == cp.length_ns


def test_event_sync_path_runs_through_the_kernel_the_host_waited_for(shared_traces: Path) -> None:
    trace: Trace = explorer.load(
        shared_traces / "critical_path__cuda_event_sync__event_sync_trace.json.gz"
    )
    cp = trace.critical_path(step=100)
    step = trace.steps().iloc[0]
    # The step's whole span: from the ProfilerStep annotation's start to its end.
    assert (cp.start_ns, cp.end_ns) == (step["start_ns"], step["end_ns"])
    names = trace.slices["name"].astype(str).to_numpy()
    on_path = list(names[cp.slices])
    # The spin kernel (36 us) outlasts the host's wait in cudaEventSynchronize, so the path
    # goes launch -> kernel -> sync edge rather than through the blocked call.
    spin = "at::cuda::(anonymous namespace)::spin_kernel(long)"
    assert spin in on_path
    # Each device excursion of the path: launch -> device op -> the host call that waited.
    types = list(cp.edges["type"].astype(str))
    trips = []
    for i in (k for k, t in enumerate(types) if t == "launch"):
        assert types[i : i + 3] == ["launch", "duration", "sync"]
        trips.append((names[cp.edges["dst"].iat[i]], names[cp.edges["dst"].iat[i + 2]]))
    # The DtoH copy of .item() blocks cudaMemcpyAsync (pageable memory); the spin kernel is
    # what cudaEventSynchronize waited for.
    assert trips == [
        ("Memcpy DtoH (Device -> Pageable)", "cudaMemcpyAsync"),
        (spin, "cudaEventSynchronize"),
    ]
    summary = dict(zip(cp.summary["category"], cp.summary["ns"], strict=True))
    assert summary["device_compute"] == 36_000
    assert cp.top_ops["name"].iat[0] == "aten::empty"  # 2.2 ms of the 3.2 ms step


def _launch_pair(corr: int, t_call: float, t_kernel: float, kernel_dur: float) -> list[dict]:
    return [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": t_call,
            "dur": 5,
            "args": {"correlation": corr, "External id": corr},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": f"kernel_{corr}",
            "pid": 0,
            "tid": 7,
            "ts": t_kernel,
            "dur": kernel_dur,
            "args": {"correlation": corr, "stream": 7, "device": 0, "External id": corr},
        },
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": 1, "tid": 1, "ts": t_call},
        {
            "ph": "f",
            "cat": "ac2g",
            "name": "ac2g",
            "id": corr,
            "pid": 0,
            "tid": 7,
            "ts": t_kernel,
            "bp": "e",
        },
    ]


def test_device_bound_step_path_is_the_kernels(tmp_path: Path) -> None:
    # synthetic: the host launches two long kernels back to back, then waits for them
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 1000,
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 50},
        *_launch_pair(1, 20, 30, 500),
        *_launch_pair(2, 40, 530, 400),
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaDeviceSynchronize",
            "pid": 1,
            "tid": 1,
            "ts": 70,
            "dur": 870,
            "args": {"correlation": 3},
        },
    ]
    trace = trace_from_events(events, {"synthetic": True})
    cp = critical_path(trace, step=1)
    check_path(trace, cp)
    names = list(trace.slices["name"].astype(str).to_numpy()[cp.slices])
    assert "kernel_1" in names and "kernel_2" in names
    assert "cudaDeviceSynchronize" in names  # its end, reached from the last kernel
    s = dict(zip(cp.summary["category"], cp.summary["ns"], strict=True))
    assert s["device_compute"] == 900_000
    assert s["sync_wait"] == 10_000  # last kernel end (930) -> sync call end (940)
    assert cp.length_ns == 1_000_000


def test_host_bound_step_path_stays_on_the_host() -> None:
    # synthetic: long host ops between tiny kernels; the device idles most of the step
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 1000,
        }
    ]
    for k in range(4):
        t = 10 + 240 * k
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::slow_host_op",
                "pid": 1,
                "tid": 1,
                "ts": t,
                "dur": 200,
            }
        )
        events += _launch_pair(k + 1, t + 205, t + 212, 3)
    trace = trace_from_events(events, {"synthetic": True})
    cp = critical_path(trace, step=1)
    check_path(trace, cp)
    s = dict(zip(cp.summary["category"], cp.summary["ns"], strict=True))
    assert s["host_compute"] >= 800_000
    assert s["device_compute"] <= 3_000
    assert cp.top_ops["name"].iat[0] == "aten::slow_host_op"
    assert cp.top_ops["count"].iat[0] == 4


def test_report_section_in_every_format(shared_traces: Path) -> None:
    import json

    from explorer.report import critical_path_section as cps
    from explorer.report import render

    trace = explorer.load(
        shared_traces / "critical_path__cuda_event_sync__event_sync_trace.json.gz"
    )
    cp = trace.critical_path()
    text = cps.render_text(cp)
    assert text.startswith("Critical path of the whole trace: 3.15 ms")
    assert "spin_kernel" in text and "device compute" in text
    md = cps.render_markdown(cp)
    assert "| device compute | 36.0 µs | 1.1% |" in md
    html = cps.render_html(cp)
    assert "<table>" in html and "<script" not in html
    d = json.loads(json.dumps(cps.to_dict(cp)))
    assert d["length_ns"] == 3_154_000 and sum(d["summary"].values()) == d["length_ns"]
    assert sum(s["ns"] for s in d["segments"]) == d["length_ns"]
    # The report puts the section under its heading, in every format.
    for fmt, marker in (
        ("text", "Critical path of"),
        ("markdown", "## Critical path"),
        ("html", "Critical path"),
    ):
        assert marker in render(trace, format=fmt)
    assert json.loads(render(trace, format="json"))["critical_path"]["length_ns"] == 3_154_000


def _scenario_path(name: str):
    from explorer import scenarios

    # synthetic: the scenario generator's simulated training loop (steps 0-3, step 2 read)
    doc = scenarios.generate(name, steps=4)
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    trace = trace_from_events(doc["traceEvents"], meta, cls=Trace)
    cp = critical_path(trace, 2)
    check_path(trace, cp)
    share = {
        c: ns / cp.length_ns for c, ns in zip(cp.summary["category"], cp.summary["ns"], strict=True)
    }
    return trace, cp, share


def test_scenarios_put_their_injected_cause_on_the_path() -> None:
    trace, cp, share = _scenario_path("clean")
    assert share["device_compute"] > 0.8  # a healthy step is the device's kernels
    # Its launches block on the full launch queue: the graph ties each to the op that freed
    # the slot, so the path runs on the device rather than through the blocked calls.
    assert dependency_graph(trace, 2).counts()["queue"] > 0
    trace, cp, share = _scenario_path("input_stall")
    assert share["host_compute"] > 0.3
    assert any("_next_data" in n for n in cp.top_ops["name"].head(3))
    assert "load_batch" in set(cp.top_lines["function"])
    trace, cp, share = _scenario_path("pageable_copies")
    # The host blocks in cudaMemcpyAsync on a pageable copy: the path runs through the copy.
    assert share["data_movement"] > 0.1
    assert "Memcpy HtoD (Pageable -> Device)" in set(cp.top_ops["name"])
    trace, cp, share = _scenario_path("launch_bound")
    # The metrics phase launches tiny kernels more slowly than the device runs them: the
    # path stays on the host there, and that line is the path's heaviest.
    assert cp.top_lines["function"].iat[0] == "compute_metrics"
    assert share["launch_overhead"] + share["host_compute"] > 0.4
    assert "cudaLaunchKernel" in set(cp.top_ops["name"].head(2))
    trace, cp, share = _scenario_path("cpu_fallback")
    assert "aten::_linalg_eig" in set(cp.top_ops["name"].head(3))
