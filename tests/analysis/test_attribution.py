"""Source attribution: host slices through their own or an ancestor's stack, device slices
through the runtime call that launched them. Synthetic scenarios (which carry Python
stacks and launch flows) give the known lines; real traces check the launch mapping."""

from __future__ import annotations

import numpy as np
import pytest

import explorer
from explorer.analysis.attribution import launcher, slice_sources, top_lines
from explorer.scenarios import generate
from explorer.trace.build import trace_from_events
from explorer.trace_api import Trace
from tests.conftest import SHARED_TRACES

TRAIN = "/synthetic/train.py"


@pytest.fixture(scope="module")
def sync_storm() -> Trace:
    doc = generate("sync_storm", steps=3, seed=0)
    return Trace(
        trace_from_events(doc["traceEvents"], {k: v for k, v in doc.items() if k != "traceEvents"})
    )


def test_device_copies_get_the_line_of_their_launch(sync_storm: Trace) -> None:
    t = sync_storm
    src = slice_sources(t)
    assert len(src) == len(t.slices)
    on_device = np.isin(t.slices["track"].to_numpy(), t.device_tracks()["id"].to_numpy())
    is_dtoh = (t.slices["name"].astype(str) == "Memcpy DtoH (Device -> Pageable)").to_numpy()
    dtoh = np.flatnonzero(is_dtoh & on_device)
    assert len(dtoh) == 8 * 3
    assert set(zip(src["file"].to_numpy()[dtoh], src["line"].to_numpy()[dtoh], strict=True)) == {
        (TRAIN, 75)
    }
    assert set(src["function"].to_numpy()[dtoh]) == {"check_finite"}


def test_every_launched_device_slice_maps_to_a_host_runtime_call(sync_storm: Trace) -> None:
    t = sync_storm
    src = launcher(t)
    dev = np.isin(t.slices["track"].to_numpy(), t.device_tracks()["id"].to_numpy())
    kinds = t.slices["kind"].to_numpy().astype(str)
    work = dev & np.isin(kinds, ["kernel", "memcpy", "memset"])
    assert (src[work] >= 0).all()
    assert not dev[src[work]].any()  # launchers are on the host
    corr = t.slices["correlation"].to_numpy()
    assert (corr[work] == corr[src[work]]).all()
    assert (src[~dev] == -1).all()


def test_ops_without_a_stack_inherit_their_ancestors_line(sync_storm: Trace) -> None:
    t = sync_storm
    src = slice_sources(t)
    s = t.slices
    item = np.flatnonzero((s["name"].astype(str) == "aten::_local_scalar_dense").to_numpy())
    assert len(item) == 8 * 3
    # aten::_local_scalar_dense sits under aten::item under check_finite's Python frame
    assert set(src["line"].to_numpy()[item]) == {75}
    assert top_lines(t, item) == [(TRAIN, 75, "check_finite")]


def test_kernel_from_the_backward_thread_maps_to_its_launch() -> None:
    path = SHARED_TRACES / "call_stack__backward_thread.json"
    if not path.exists():
        pytest.skip("../shared/traces is absent (it is not part of a user's clone)")
    t = explorer.load(path)
    s = t.slices
    kernel = int(np.flatnonzero((s["kind"] == "kernel").to_numpy())[0])
    src = launcher(t)[kernel]
    assert (
        s["kind"].iat[src] == "runtime"
        and s["correlation"].iat[src] == s["correlation"].iat[kernel]
    )
    # this trace has no Python stacks: unknown, not invented
    assert slice_sources(t)["file"].iat[kernel] == "" and slice_sources(t)["line"].iat[kernel] == -1


def test_one_answer_for_a_slice_whatever_asks(sync_storm: Trace) -> None:
    """Trace.user_frame (what the Details panel shows) gives exactly slice_sources' line for
    every slice — kernels included, through their launch — before or after the table is
    computed."""
    from explorer.analysis.attribution import user_line

    doc = generate("sync_storm", steps=2, seed=1)
    fresh = Trace(
        trace_from_events(doc["traceEvents"], {k: v for k, v in doc.items() if k != "traceEvents"})
    )
    kernels = np.flatnonzero((fresh.slices["kind"] == "kernel").to_numpy())
    first = [fresh.user_frame(int(i)) for i in kernels]  # asked before anything else ran
    src = slice_sources(fresh)
    want = [(src["file"].iat[i], int(src["line"].iat[i]), src["function"].iat[i]) for i in kernels]
    assert first == want and all(f is not None and f[0] == TRAIN for f in first)
    every = range(len(fresh.slices))
    assert [user_line(fresh, i) for i in every] == [
        None
        if src["file"].iat[i] == ""
        else (src["file"].iat[i], int(src["line"].iat[i]), src["function"].iat[i])
        for i in every
    ]


def test_a_user_package_named_explorer_keeps_its_lines() -> None:
    """A user's own package called ``explorer`` is user code; Explorer's own modules, at any
    install prefix, are not."""
    from explorer.trace.source import is_user_file

    host = {"pid": 1, "tid": 1}

    def frame(name: str, ts: int, dur: int) -> dict:
        return {"ph": "X", "cat": "python_function", "name": name, "ts": ts, "dur": dur, **host}

    ev = [
        frame("/opt/lab/site-packages/explorer/collect/session.py(168): __enter__", 0, 100),
        frame("explorer/train.py(12): step", 10, 80),
        frame("/work/other/explorer/__init__.py(60): annotate", 20, 30),
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 25, "dur": 10, **host},
        frame("/home/me/proj/explorer/model.py(30): forward", 60, 20),
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "ts": 65, "dur": 5, **host},
    ]
    t = Trace(trace_from_events(ev))
    names = t.slices["name"].astype(str).tolist()
    mm, relu = names.index("aten::mm"), names.index("aten::relu")
    # aten::mm runs inside Explorer's annotate(), called from the user's step(): line 12
    assert t.user_frame(mm) == ("explorer/train.py", 12, "step")
    assert t.user_frame(relu) == ("/home/me/proj/explorer/model.py", 30, "forward")
    assert t.user_frame(names.index(names[0])) is None  # Explorer's own context manager
    assert is_user_file("explorer/train.py") and is_user_file("explorer/data/loader.py")
    assert not is_user_file("explorer/collect/session.py")
    assert not is_user_file("/anywhere/lib/explorer/analysis/breakdown.py")


def test_slice_sources_hold_codes_not_a_string_per_slice(sync_storm: Trace) -> None:
    """The viewer keeps this table while it is open: its file and function columns are
    codes over the trace's distinct lines (8 + 1 + 1 bytes a slice here), not strings per
    slice (~100 bytes a slice, 250 MB on a million slices)."""
    src = slice_sources(sync_storm)
    frames = src.drop_duplicates()
    assert len(frames) < len(src) / 10  # few distinct lines among many slices
    per_slice = src.memory_usage(deep=True, index=False).sum() / len(src)
    assert per_slice < 16, per_slice
    known = src["file"] != ""
    assert known.any() and (src["line"][known] > 0).all() and (src["line"][~known] == -1).all()
