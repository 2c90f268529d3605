"""Steps from ProfilerStep annotations, from a user pattern, or the whole trace."""

from __future__ import annotations

import numpy as np
import pytest

import explorer
from explorer.analysis.steps import select_steps, steps
from explorer.errors import UsageError
from explorer.trace.build import trace_from_events
from explorer.trace_api import Trace
from tests.conftest import SHARED_TRACES

HOST = {"pid": 1, "tid": 1}
WORKER = {"pid": 1, "tid": 2}


def _x(name: str, ts: float, dur: float, where: dict = HOST, cat: str = "user_annotation") -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, **where}


def test_profiler_steps_on_a_real_distributed_trace() -> None:
    path = SHARED_TRACES / "nccl_parser_config__nccl_data.json.gz"
    if not path.exists():
        pytest.skip("../shared/traces is absent (it is not part of a user's clone)")
    t = explorer.load(path)
    st = t.steps()
    assert st["step"].tolist() == [4, 5, 6]
    assert (st["end_ns"] == st["start_ns"] + st["dur_ns"]).all()
    assert (np.diff(st["start_ns"]) > 0).all()
    for row in st.itertuples():
        # the slice is the host annotation itself, not its copy on the GPU timeline
        assert t.slices["name"].iat[row.slice] == row.name == f"ProfilerStep#{row.step}"
        assert t.slices["kind"].iat[row.slice] == "annotation"
        assert t.slices["ts"].iat[row.slice] == row.start_ns


def test_the_longest_copy_of_a_step_wins_and_steps_are_in_time_order() -> None:
    t = Trace(
        trace_from_events(
            [
                _x("ProfilerStep#8", 100, 50),
                _x("ProfilerStep#7", 0, 90),
                _x("ProfilerStep#7", 10, 20, WORKER),
            ]
        )
    )
    st = steps(t)
    assert st["step"].tolist() == [7, 8]
    assert st["dur_ns"].tolist() == [90_000, 50_000]


def test_user_pattern_numbers_matches_in_time_order() -> None:
    ev = [_x("iteration", 0, 10), _x("iteration", 20, 10), _x("aten::mm", 1, 2, cat="cpu_op")]
    t = Trace(trace_from_events(ev))
    st = steps(t, pattern=r"^iteration$")
    assert st["step"].tolist() == [0, 1]
    assert st["start_ns"].tolist() == [0, 20_000]
    with pytest.raises(UsageError, match="no host annotation"):
        steps(t, pattern="nothing-like-this")
    with pytest.raises(UsageError, match="not a valid regular expression"):
        steps(t, pattern="(")


def test_without_annotations_the_whole_trace_is_one_step() -> None:
    t = Trace(
        trace_from_events(
            [_x("aten::mm", 5, 10, cat="cpu_op"), _x("aten::add", 30, 5, cat="cpu_op")]
        )
    )
    st = steps(t)
    assert st.to_dict("records") == [
        # times are relative to the trace's first event (metadata["start_ns"])
        {"step": 0, "name": "trace", "start_ns": 0, "dur_ns": 30_000, "end_ns": 30_000, "slice": -1}
    ]
    with pytest.raises(UsageError, match="steps: 0"):
        select_steps(t, 1)


def test_repeated_step_numbers_are_renumbered_in_time_order() -> None:
    """Two captures concatenated in time both count ProfilerStep#1, #2: four distinct steps."""
    ev = [
        _x("ProfilerStep#1", 0, 10),
        _x("ProfilerStep#2", 10, 10),
        _x("ProfilerStep#1", 50, 10),
        _x("ProfilerStep#2", 60, 10),
    ]
    st = steps(Trace(trace_from_events(ev)))
    assert st["step"].tolist() == [0, 1, 2, 3]
    assert st["name"].tolist() == ["ProfilerStep#1", "ProfilerStep#2"] * 2
