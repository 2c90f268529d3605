"""The critical path: contiguous, made of graph edges, as long as its span, summarised
exactly — on every real trace — and on the right chain in synthetic device-bound and
host-bound steps built in memory (labelled synthetic below)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import explorer
from explorer.analysis.critical_path import CriticalPath, critical_path
from explorer.analysis.dependency_graph import dependency_graph
from explorer.analysis.graph.edges import PATH_CATEGORIES
from explorer.trace.build import trace_from_events
from explorer.trace_api import Trace


def check_path(trace, cp: CriticalPath, all_steps: bool = False) -> None:
    """The invariants the issue asks for, on any trace."""
    e = cp.edges
    graph = dependency_graph(trace, cp.step, all_steps)
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


@pytest.mark.slow
def test_invariants_hold_on_every_real_trace(shared_traces: Path) -> None:
    from tests.conftest import shared_trace_files

    for path in shared_trace_files():
        trace = explorer.load(path)
        cp = critical_path(trace)
        check_path(trace, cp)
        check_path(trace, critical_path(trace, all_steps=True), all_steps=True)
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
    # Each device excursion of the path: from the host (its launch, or the host idle in the
    # step right after the launch returned: a hand-off) -> device op -> the host call that
    # waited.
    types = list(cp.edges["type"].astype(str))
    trips = []
    for i in (k for k, t in enumerate(types) if t in ("launch", "handoff")):
        assert types[i + 1 : i + 3] == ["duration", "sync"]
        trips.append((names[cp.edges["dst"].iat[i]], names[cp.edges["dst"].iat[i + 2]]))
    # The DtoH copy of .item() blocks cudaMemcpyAsync (pageable memory); the spin kernel is
    # what cudaEventSynchronize waited for.
    assert trips == [
        ("Memcpy DtoH (Device -> Pageable)", "cudaMemcpyAsync"),
        (spin, "cudaEventSynchronize"),
    ]
    # The device time on the path is exactly the spin kernel's duration, read from the
    # trace (the DtoH copy is data movement).
    summary = dict(zip(cp.summary["category"], cp.summary["ns"], strict=True))
    spin_dur = int(trace.slices["dur"].to_numpy()[names == spin][0])
    assert summary["device_compute"] == spin_dur
    # The host op with the most time of its own holds the most path time.
    host_ops = np.flatnonzero((trace.slices["kind"] == "cpu_op").to_numpy())
    own = _geometric_self_ns(trace, host_ops)
    assert cp.top_ops["name"].iat[0] == names[max(own, key=own.get)]


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
    assert s["host_compute"] == 800_000  # the four host ops, whole
    # Each tiny kernel runs while the host records nothing (the step annotation's own time
    # between ops): the path follows it there and comes back; none of it is idle.
    assert s["device_compute"] == 4 * 3_000
    assert cp.top_ops["name"].iat[0] == "aten::slow_host_op"
    assert cp.top_ops["count"].iat[0] == 4


def test_report_section_in_every_format(shared_traces: Path) -> None:
    import json

    from explorer.report import critical_path_section as cps
    from explorer.report import render

    trace = explorer.load(
        shared_traces / "critical_path__cuda_event_sync__event_sync_trace.json.gz"
    )
    from explorer.report.sections import pct
    from explorer.units import fmt_ns

    cp = critical_path(trace, all_steps=True)
    # Without --step the path covers the trace's steps (here the one ProfilerStep#100).
    step = trace.steps().iloc[0]
    assert (cp.start_ns, cp.end_ns) == (step["start_ns"], step["end_ns"])
    # The section is built from the report document's data, then laid out by each format.
    from explorer.report.document import Document
    from explorer.report.formats import render as render_doc

    alone = Document("path", sections=[cps.section(cps.to_dict(cp))])
    text = render_doc(alone, "text")
    assert f"Critical path of step {step['step']}: {fmt_ns(step['dur_ns'])}" in text
    assert "spin_kernel" in text and "device compute" in text
    md = render_doc(alone, "markdown")
    dev = int(cp.summary.set_index("category")["ns"]["device_compute"])
    assert f"| device compute | {fmt_ns(dev)} | {pct(dev, cp.length_ns).strip()} |" in md
    html = render_doc(alone, "html")
    assert "<table>" in html and "<script" not in html and "data-chart='composition'" in html
    d = json.loads(json.dumps(cps.to_dict(cp)))
    assert d["length_ns"] == step["dur_ns"] and sum(d["summary"].values()) == d["length_ns"]
    assert sum(s["ns"] for s in d["segments"]) == d["length_ns"]
    # The report puts the section under its heading, in every format.
    for fmt, marker in (
        ("text", "Critical path of"),
        ("markdown", "## Critical path"),
        ("html", "Critical path"),
    ):
        assert marker in render(trace, format=fmt)
    assert json.loads(render(trace, format="json"))["critical_path"]["length_ns"] == step["dur_ns"]


def _scenario_path(name: str):
    from explorer import scenarios

    # synthetic: the scenario generator's simulated training loop (steps 0-3, step 2 read)
    doc = scenarios.generate(name, steps=4)
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    trace = Trace(trace_from_events(doc["traceEvents"], meta))
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
    # The loader's time is input, as the breakdown calls it, not host compute.
    assert share["input"] > 0.3 and share["host_compute"] < 0.05
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


# --- The path follows the work, and names it as the breakdown does -----------------------


def _geometric_self_ns(trace, ids) -> dict[int, int]:
    """Each slice's time not covered by other slices inside it on its track — computed from
    the intervals alone, not from the parent column or anything the graph reads."""
    s = trace.slices
    ts = s["ts"].to_numpy()
    end = ts + s["dur"].to_numpy()
    track = s["track"].to_numpy()
    order = np.lexsort((-end, ts, track))  # per track by start, outer first
    key_track, key_ts = track[order], ts[order]
    out = {}
    for i in ids:
        lo = np.searchsorted(key_track, track[i], "left")
        hi = np.searchsorted(key_track, track[i], "right")
        a = lo + np.searchsorted(key_ts[lo:hi], ts[i], "left")
        b = lo + np.searchsorted(key_ts[lo:hi], end[i], "left")
        cand = order[a:b]
        cand = cand[(cand != i) & (end[cand] <= end[i])]
        # the same interval twice: the one listed later is the inner one
        cand = cand[~((ts[cand] == ts[i]) & (end[cand] == end[i]) & (cand < i))]
        if len(cand) == 0:
            out[int(i)] = int(end[i] - ts[i])
            continue
        st, en = ts[cand], end[cand]  # already by start
        reach = np.maximum.accumulate(np.r_[st[0], en[:-1]])
        covered = np.maximum(en - np.maximum(st, reach), 0).sum()
        out[int(i)] = int(end[i] - ts[i] - covered)
    return out


def _owned_ns(cp) -> dict[int, int]:
    """Path time each slice holds as its own (its duration or its self time)."""
    e = cp.edges
    own = e[e["type"].astype(str).isin(["duration", "nest", "sibling"]) & (e["owner"] >= 0)]
    return {int(k): int(v) for k, v in own.groupby("owner")["weight"].sum().items()}


SAMPLE_FILES = sorted((Path(__file__).parents[2] / "sample_traces").glob("*.json.gz"))


def _no_slice_holds_more_than_its_own_time(trace, name: str) -> None:
    steps = trace.steps()
    scopes = [(None, False), (None, True)]
    if steps["slice"].iat[0] >= 0:
        scopes += [(int(s), False) for s in steps["step"].tolist()[:2]]
    for step, all_steps in scopes:
        cp = critical_path(trace, step, all_steps)
        owned = _owned_ns(cp)
        own_self = _geometric_self_ns(trace, owned)
        over = {i: (owned[i], own_self[i]) for i in owned if owned[i] > own_self[i]}
        assert not over, (name, step, all_steps, over)


@pytest.mark.slow
@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.name.split(".")[0])
def test_no_slice_holds_more_path_time_than_its_self_time(path: Path) -> None:
    # The samples record Python stacks: frames that start inside one annotation and end
    # inside the next, a step annotation that starts inside a 7 us frame.
    _no_slice_holds_more_than_its_own_time(explorer.load(path), path.name)


@pytest.mark.slow
def test_no_slice_holds_more_path_time_than_its_self_time_on_shared_traces(
    shared_traces: Path,
) -> None:
    from tests.conftest import shared_trace_files

    for path in shared_trace_files():
        _no_slice_holds_more_than_its_own_time(explorer.load(path), path.name)


def _engine_tracks(trace) -> set[int]:
    names = trace.slices["name"].astype(str)
    engine = names.str.startswith("autograd::engine::evaluate_function").to_numpy()
    return set(trace.slices["track"].to_numpy()[engine].tolist())


def test_path_enters_the_backward_thread(shared_traces: Path) -> None:
    for name in (
        "call_stack__backward_thread.json",
        "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    ):
        trace = explorer.load(shared_traces / name)
        engine = _engine_tracks(trace)
        main = set(trace.slices["track"].to_numpy()[trace.steps()["slice"].to_numpy()].tolist())
        assert engine and not engine & main  # backward runs on a thread of its own
        ts = trace.slices["ts"].to_numpy()
        engine_ts = ts[np.isin(trace.slices["track"].to_numpy(), list(engine))]
        for step in trace.steps().itertuples():
            if not ((engine_ts >= step.start_ns) & (engine_ts < step.end_ns)).any():
                continue  # no backward in this step (the AMD trace's last is 49 us long)
            cp = critical_path(trace, int(step.step))
            on = set(trace.slices["track"].to_numpy()[cp.slices].tolist())
            assert on & engine, (name, step.step)
    # The 7-event trace: the main thread's `## backward ##` is a leaf around the engine's
    # op; none of the wait is charged to it or to the step around it.
    trace = explorer.load(shared_traces / "call_stack__backward_thread.json")
    cp = critical_path(trace)
    names = trace.slices["name"].astype(str).to_numpy()
    owned = _owned_ns(cp)
    backward = int(np.flatnonzero(names == "## backward ##")[0])
    step = int(np.flatnonzero(names == "ProfilerStep#552")[0])
    assert owned.get(backward, 0) == 0
    dur = trace.slices["dur"].to_numpy()
    assert owned[step] <= dur[step] - dur[backward]


def test_compile_time_on_the_path_is_compile(sample_traces: Path) -> None:
    from explorer.analysis.breakdown import breakdown, name_flags
    from explorer.analysis.classify import COMPILE_NAMES

    trace = explorer.load(sample_traces / "cpu_compile_graph_break.pt.trace.json.gz")
    kind = trace.slices["kind"].to_numpy()
    ts = trace.slices["ts"].to_numpy()
    end = ts + trace.slices["dur"].to_numpy()
    # Compile spans: the collector's own, and dynamo/inductor's by name.
    comp = np.flatnonzero((kind == "compile") | name_flags(trace, COMPILE_NAMES))
    bd = breakdown(trace)
    for step in trace.steps()["step"].tolist():
        cp = critical_path(trace, int(step))
        e = cp.edges
        # Independent: a path edge is compile time when a compile span contains it.
        a = np.where(e["src_point"] == 0, ts[e["src"]], end[e["src"]])
        b = a + e["weight"].to_numpy()
        inside = ((ts[comp][None, :] <= a[:, None]) & (b[:, None] <= end[comp][None, :])).any(1)
        expect = int(e["weight"].to_numpy()[inside & (e["owner"].to_numpy() >= 0)].sum())
        got = int(cp.summary.set_index("category")["ns"]["compile"])
        assert got == expect
        # and, on this one-thread trace where the path covers the step, the breakdown's
        # compile time of the step (its sweep over the same spans).
        want = bd[(bd["step"] == step) & (bd["category"] == "compile")]["ns"].sum()
        assert got == want
    # Over all steps (the ~416 ms of dynamo tracing the issue saw as "host compute").
    whole = critical_path(trace, all_steps=True).summary.set_index("category")["ns"]["compile"]
    assert whole == bd[bd["category"] == "compile"]["ns"].sum() > 0


def test_gloo_collectives_are_communication(shared_traces: Path) -> None:
    trace = explorer.load(shared_traces / "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    s = trace.slices
    step = trace.steps().iloc[0]
    gloo = s[(s["name"].astype(str) == "gloo:all_reduce").to_numpy()]
    within = gloo[(gloo["ts"] >= step["start_ns"]) & (gloo["ts"] + gloo["dur"] <= step["end_ns"])]
    cp = critical_path(trace, all_steps=True)
    # The step's thread only waits (the ProfilerStep annotation records nothing else): the
    # path runs through the longest collective run inside it, all of it communication.
    summary = cp.summary.set_index("category")["ns"]
    assert (cp.start_ns, cp.end_ns) == (step["start_ns"], step["end_ns"])  # via the wait
    assert summary["communication"] == int(within["dur"].max())
    assert set(cp.edges[cp.edges["owner"].isin(gloo.index)]["category"]) == {"communication"}
    assert summary["host_compute"] == 0


def test_no_communication_on_a_path_without_collectives(shared_traces: Path) -> None:
    # The AMD trace trains on one GPU: no NCCL/RCCL/gloo/c10d op anywhere in it, but an
    # aten::broadcast_tensors (a reshape) that a loose pattern used to call a collective.
    trace = explorer.load(shared_traces / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    names = trace.slices["name"].astype(str)
    assert not names.str.contains(r"nccl|rccl|gloo|c10d", case=False).any()
    assert names.str.contains("broadcast_tensors").any()
    for step in [None, *trace.steps()["step"].tolist()]:
        cp = critical_path(trace, step)
        assert cp.summary.set_index("category")["ns"]["communication"] == 0


def test_runtime_calls_that_launch_nothing_are_host_runtime(shared_traces: Path) -> None:
    trace = explorer.load(
        shared_traces / "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz"
    )
    cp = critical_path(trace)
    e = cp.edges
    names = trace.slices["name"].astype(str).to_numpy()
    launch = trace.flows[trace.flows["type"].astype(str) == "launch"]
    launched = set(launch["src"].tolist())
    runtime = trace.slices["kind"].to_numpy() == "runtime"
    own = e[e["type"].astype(str) == "duration"]
    alloc = own[np.isin(names[own["src"]], ["cudaMalloc", "cudaFree"])]
    assert len(alloc) and set(alloc["category"]) == {"host_runtime"}
    launching = own[[int(x) in launched and runtime[int(x)] for x in own["src"]]]
    assert len(launching) and set(launching["category"]) == {"launch_overhead"}


@pytest.mark.slow
def test_report_steps_and_step_scope_the_path(shared_traces: Path, sample_traces: Path) -> None:
    import json
    import subprocess
    import sys

    def report(path: Path, *args: str) -> dict:
        out = subprocess.run(
            [sys.executable, "-m", "explorer", "report", str(path), "-f", "json", "--no-cache", *args],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return json.loads(out.stdout)["critical_path"]

    trace = explorer.load(sample_traces / "cpu_cnn.pt.trace.json.gz")
    s = trace.slices
    names = s["name"].astype(str)
    # --steps REGEX: the path spans the matching annotations, read from the trace itself.
    hit = s[names.str.fullmatch(r"ProfilerStep#[12]").to_numpy()]
    d = report(sample_traces / "cpu_cnn.pt.trace.json.gz", "--steps", r"ProfilerStep#[12]")
    assert d["window_ns"] == [int(hit["ts"].min()), int((hit["ts"] + hit["dur"]).max())]
    assert d["scope"] == "steps 0-1"
    assert d["start_ns"] >= d["window_ns"][0]
    # --step N: that step's annotation only.
    one = s[(names == "ProfilerStep#2").to_numpy()].iloc[0]
    d = report(sample_traces / "cpu_cnn.pt.trace.json.gz", "--step", "2")
    assert d["window_ns"] == [int(one["ts"]), int(one["ts"] + one["dur"])]
    assert d["scope"] == "step 2"


def test_allocation_and_queries_are_host_runtime_launches_are_launch_overhead() -> None:
    # synthetic: one host thread calls the runtime five ways around one kernel launch
    calls = ["cudaMalloc", "cudaStreamQuery", "cudaEventQuery", "cudaGetDevice", "cudaFree"]
    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": n, "pid": 1, "tid": 1, "ts": 10 * k, "dur": 8}
        for k, n in enumerate(calls)
    ]
    events += _launch_pair(1, 60, 70, 5)
    trace = trace_from_events(events, {"synthetic": True})
    from explorer.analysis.critical_path import path_costs

    cp = critical_path(trace)
    e = cp.edges[cp.edges["type"].astype(str) == "duration"]
    names = trace.slices["name"].astype(str).to_numpy()
    on_path = dict(zip(names[e["owner"]], e["category"], strict=True))
    assert {n: on_path[n] for n in calls} == dict.fromkeys(calls, "host_runtime")
    # The launch call's own time, wherever a path takes it.
    launch = np.flatnonzero(names == "cudaLaunchKernel")
    categories = path_costs(trace, dependency_graph(trace)).categories
    got = categories(launch, trace.slices["ts"].to_numpy()[launch])
    assert [PATH_CATEGORIES[c] for c in got] == ["launch_overhead"]


# --- The path follows the work across threads; its time is what the breakdown says --------


@pytest.mark.slow
def test_path_follows_work_on_another_thread_in_a_real_cpu_run(tmp_path: Path) -> None:
    # A real torch.profiler run (all threads recorded): each step's thread only waits in
    # join() while a worker thread runs the forward and the backward. No name says so.
    torch = pytest.importorskip("torch")
    import threading

    from torch._C._profiler import _ExperimentalConfig
    from torch.profiler import ProfilerActivity, profile, record_function

    w = torch.randn(128, 128, requires_grad=True)
    x = torch.randn(128, 128)

    def work() -> None:
        for _ in range(5):
            x @ x
        (x @ w).tanh().sum().backward()

    config = _ExperimentalConfig(profile_all_threads=True)
    with profile(activities=[ProfilerActivity.CPU], experimental_config=config) as prof:
        for k in range(2):
            with record_function(f"ProfilerStep#{k}"):
                t = threading.Thread(target=work)
                t.start()
                t.join()
    prof.export_chrome_trace(str(tmp_path / "threads.json"))
    trace = explorer.load(tmp_path / "threads.json", use_cache=False)
    s = trace.slices
    ts, end = s["ts"].to_numpy(), (s["ts"] + s["dur"]).to_numpy()
    track = s["track"].to_numpy()
    steps = trace.steps()
    main = set(track[steps["slice"].to_numpy()].tolist())
    for step in steps.itertuples():
        cp = critical_path(trace, int(step.step))
        check_path(trace, cp)
        assert (cp.start_ns, cp.end_ns) == (step.start_ns, step.end_ns)
        # The worker's top-level ops in the step, from the intervals alone: the path holds
        # them whole, as host compute; the rest of the step is idle (only the step's span).
        top = (s["parent"].to_numpy() < 0) & ~np.isin(track, list(main))
        top &= (ts >= step.start_ns) & (end <= step.end_ns) & trace.on_host()
        assert len(set(track[top].tolist())) == 1  # one worker thread per step
        busy = int((end[top] - ts[top]).sum())
        summary = dict(zip(cp.summary["category"], cp.summary["ns"], strict=True))
        assert summary["host_compute"] == busy > 0
        assert summary["idle_gap"] == cp.length_ns - busy


def test_path_and_breakdown_agree_on_device_time(shared_traces: Path) -> None:
    from explorer.analysis.breakdown import breakdown

    # MTIA inference: the service threads idle between requests while 12 queues compute.
    trace = explorer.load(shared_traces / "mtia_inference_trace__mtia_inference_rank_0.json.gz")
    cp = critical_path(trace, all_steps=True)
    summary = dict(zip(cp.summary["category"], cp.summary["ns"], strict=True))
    bd = breakdown(trace).groupby("category")["ns"].sum()
    span = int(trace.steps()["dur_ns"].sum())
    # The path runs through the device wherever it works: what the breakdown calls compute
    # the path calls device compute (within 2% of the span), not idle gaps (61.5% before).
    assert abs(summary["device_compute"] - bd["compute"]) <= 0.02 * span
    assert summary["idle_gap"] <= bd["other_idle"] + 0.02 * span


def test_a_long_step_has_a_path_as_long(shared_traces: Path) -> None:
    from explorer.analysis.breakdown import breakdown

    # The Triton sample: a 13.3 s ProfilerStep (recorded under another pid) around 1.5 ms of
    # work. The path is the step, and what it is agrees with the breakdown: idle.
    trace = explorer.load(shared_traces / "triton_example__triton_example.json.gz")
    step = trace.steps().iloc[0]
    cp = critical_path(trace, int(step["step"]))
    check_path(trace, cp)
    assert (cp.start_ns, cp.end_ns) == (step["start_ns"], step["end_ns"])
    idle = int(cp.summary.set_index("category")["ns"]["idle_gap"])
    bd = breakdown(trace, int(step["step"])).groupby("category")["ns"].sum()
    assert abs(idle - bd["other_idle"]) <= 0.001 * step["dur_ns"]


def test_a_sleep_in_the_data_loader_is_input(sample_traces: Path) -> None:
    from explorer.analysis.breakdown import timelines

    # A real run whose dataset sleeps 4 ms per item, on one thread: the path is the steps,
    # and its input time is the breakdown's input time there, to the ns.
    trace = explorer.load(sample_traces / "cpu_slow_dataloader.pt.trace.json.gz")
    tl = timelines(trace)["host"]
    for step in trace.steps().itertuples():
        cp = critical_path(trace, int(step.step))
        assert (cp.start_ns, cp.end_ns) == (step.start_ns, step.end_ns)
        got = int(cp.summary.set_index("category")["ns"]["input"])
        want = int(
            tl.reason_ns("host_input", np.array([step.start_ns]), np.array([step.end_ns]))[0]
        )
        assert got == want > 0
        sleep = cp.top_ops[cp.top_ops["name"] == "<built-in function sleep>"]
        assert len(sleep) == 1  # the sleeps are on the path, as input


def _waits_with_work_beside(trace, cp, nodes) -> list[tuple[int, int, int]]:
    """Path edges where a host thread records nothing (idle, or a bare annotation's own
    time) while a whole op ran on another thread or a kernel/copy on a device: ``(a, b,
    busy slice)``. Read from the intervals of the scope's slices (``nodes``: device work
    launched before the scope, or whose launch the trace lacks, is no step's), not from the
    graph's edges."""
    s = trace.slices
    kind = s["kind"].astype(str).to_numpy()
    ts = s["ts"].to_numpy()
    end = ts + s["dur"].to_numpy()
    track = s["track"].to_numpy()
    busy = np.isin(kind, ["cpu_op", "runtime", "kernel", "memcpy", "memset", "collective"])
    busy &= (trace.on_host() | trace.on_device()) & (end > ts) & np.isin(np.arange(len(s)), nodes)
    e = cp.edges
    owner = e["owner"].to_numpy()
    bare = (owner < 0) | np.isin(kind[np.maximum(owner, 0)], ["annotation", "other"])
    wait = np.isin(e["type"].astype(str), ["thread_order", "nest", "sibling", "duration"])
    wait &= bare & (e["category"].to_numpy() == "idle_gap")
    wait &= trace.on_host()[e["src"].to_numpy()]
    out = []
    for i in np.flatnonzero(wait):
        src = int(e["src"].iat[i])
        a = ts[src] if e["src_point"].iat[i] == 0 else end[src]
        b = a + int(e["weight"].iat[i])
        inside = np.flatnonzero(busy & (ts > a) & (end < b) & (track != track[src]))
        if len(inside):
            out.append((int(a), int(b), int(inside[0])))
    return out


@pytest.mark.slow
def test_path_never_idles_beside_work(shared_traces: Path) -> None:
    # Older traces name backward ops without the engine's prefix, or record the engine's
    # thread with nothing around it on the main thread; the rule is what is busy.
    from tests.conftest import shared_trace_files

    for path in [*shared_trace_files(), *SAMPLE_FILES]:
        trace = explorer.load(path)
        scopes = [(None, False), (None, True)]
        if trace.steps()["slice"].iat[0] >= 0:
            scopes += [(int(s), False) for s in trace.steps()["step"].tolist()[:3]]
        for step, all_steps in scopes:
            cp = critical_path(trace, step, all_steps)
            nodes = dependency_graph(trace, step, all_steps).nodes
            assert not _waits_with_work_beside(trace, cp, nodes), (path.name, cp.scope)


@pytest.mark.parametrize(
    "name", ["cpu_transformer.pt.trace.json.gz", "neuron_cnn.pt.trace.json.gz"]
)
def test_categories_swept_up_front_are_the_ones_swept_when_asked(
    sample_traces: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """path_costs sweeps every host thread before it holds the per-edge arrays (and lets go
    of what only the sweeps read): the category of every slice's time at its start, its
    middle and just before its end is the one a lazily swept TimeCategories gives — and
    the one it gives asked a few hundred at a time."""
    from explorer.analysis.critical_path import launch_call_mask
    from explorer.analysis.graph import categories as categories_module
    from explorer.analysis.graph.categories import TimeCategories
    from explorer.analysis.graph.nodes import slice_arrays

    path = sample_traces / name
    trace = explorer.load(path).data
    arrays = slice_arrays(trace)
    launches = launch_call_mask(trace.slices["name"].array)
    lazy = TimeCategories(trace, arrays, launches)
    early = TimeCategories(trace, arrays, launches)
    early.sweep_all()
    ids = np.arange(arrays.n)
    ts, end = arrays.ts, arrays.end
    whole = [lazy(ids, at) for at in (ts, (ts + end) // 2, np.maximum(end - 1, ts))]
    for at, want in zip((ts, (ts + end) // 2, np.maximum(end - 1, ts)), whole, strict=True):
        assert np.array_equal(early(ids, at), want)
    monkeypatch.setattr(categories_module, "ASKED_AT_ONCE", 337)
    assert len(ids) > 10 * 337
    for at, want in zip((ts, (ts + end) // 2, np.maximum(end - 1, ts)), whole, strict=True):
        assert np.array_equal(early(ids, at), want)
    assert len(early._coded) == 0  # let go
    kinds = {PATH_CATEGORIES[c] for c in lazy(ids, ts)}
    assert len(kinds) >= 2  # the threads' time is not all one thing


def test_stored_edges_found_a_piece_at_a_time_are_found_all_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each path edge's place in the search's matrix, found a piece of the path at a time
    (a million-edge path's bounds and masks at once were the search's peak), is the one
    found all at once, and the entry there is that edge."""
    from explorer.analysis import critical_path as cp_module

    rng = np.random.default_rng(3)
    n = 400
    rows = rng.integers(0, n, 5_000)
    cols = rng.integers(0, n, 5_000)
    pairs = np.unique(rows * n + cols)
    r, c = pairs // n, pairs % n
    indptr = np.zeros(n + 1, np.int32)
    np.cumsum(np.bincount(r, minlength=n), out=indptr[1:])
    indices = c.astype(np.int32)
    pick = rng.integers(0, len(pairs), 2_000)
    p, q = r[pick].astype(np.int64), c[pick].astype(np.int64)
    whole = cp_module._stored_at(indptr, indices, p, q)
    monkeypatch.setattr(cp_module, "STORED_AT_ONCE", 37)
    pieces = cp_module._stored_at(indptr, indices, p, q)
    assert len(p) > 10 * 37
    assert np.array_equal(whole, pieces) and np.array_equal(whole, pick)
    assert np.array_equal(indices[pieces], q)


def test_first_positions_are_each_groups_first_index() -> None:
    """Per group, the first position that holds it (``np.unique``'s first index), the
    group count where none does; in the positions' narrow type either way the groups
    come (an int32 code, an int64 one)."""
    from explorer.analysis.critical_path import _first_positions

    rng = np.random.default_rng(7)
    for dtype in (np.int32, np.int64):
        group = rng.integers(0, 500, 20_000).astype(dtype)
        group[group == 42] = 7  # one group nobody holds
        first = _first_positions(group, 501)
        values, index = np.unique(group, return_index=True)
        assert np.array_equal(first[values], index)
        absent = np.setdiff1d(np.arange(501), values)
        assert 42 in absent and np.all(first[absent] == len(group))
