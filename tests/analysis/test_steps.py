"""Steps from ProfilerStep annotations, from a user pattern, or the whole trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import explorer
from explorer.analysis.steps import select_steps, steps
from explorer.errors import UsageError
from explorer.trace.build import trace_from_events
from explorer.trace_api import Trace
from tests.conftest import SHARED_TRACES

HOST = {"pid": 1, "tid": 1}
CNN = Path(__file__).resolve().parents[2] / "sample_traces" / "cpu_cnn.pt.trace.json.gz"
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
        {"step": 0, "name": "trace", "start_ns": 0, "dur_ns": 30_000, "end_ns": 30_000,
         "slice": -1, "partial": False}
    ]  # fmt: skip
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


AMD = "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"


def test_a_fragment_the_profiler_stopped_in_is_partial(shared_traces) -> None:  # noqa: ANN001
    """The real MI250 trace ends with a 49 µs ProfilerStep#2 (the profiler stopped in it):
    it is marked partial and the step time is step 1's alone."""
    from explorer.analysis.steps import partial_steps, step_times

    t = explorer.load(shared_traces / AMD)
    st = t.steps()
    assert st["step"].tolist() == [1, 2]
    assert st["partial"].tolist() == [False, True]
    assert "profiler stopped" in partial_steps(t.data)[2]
    att = select_steps(t.data, attributed=True)
    assert step_times(t.data).tolist() == [int(att["dur_ns"].iat[0])]


def _cut(path, frac: float, out) -> None:  # noqa: ANN001
    import gzip

    data = gzip.open(path).read()
    out.write_bytes(data[: int(len(data) * frac)])


@pytest.mark.slow
@pytest.mark.parametrize(("frac", "cut_steps"), [(0.5, {4, 5, 6}), (0.9, {6})])
def test_steps_a_cut_damaged_are_partial_and_the_others_whole(
    shared_traces,
    tmp_path,
    frac: float,
    cut_steps: set[int],  # noqa: ANN001
) -> None:
    """The real NCCL rank cut short (a killed run): Kineto writes host ops, runtime calls
    and kernels in sections of their own, so a cut drops events from several steps. The
    steps it damaged are partial; every step left whole has the compute it has in the
    uncut trace (an independent check: the whole file's answer)."""
    from explorer.analysis.breakdown import breakdown_wide
    from explorer.analysis.steps import partial_steps

    path = shared_traces / "nccl_parser_config__nccl_data.json.gz"
    cut = tmp_path / "cut.json"
    _cut(path, frac, cut)
    t = explorer.load(cut, use_cache=False)
    assert any("cut short" in w for w in t.metadata["warnings"])
    assert set(partial_steps(t.data)) == cut_steps
    whole = breakdown_wide(explorer.load(path)).set_index("step")["compute"]
    got = breakdown_wide(t).set_index("step")["compute"]
    for n in set(got.index) - cut_steps:
        assert got[n] == whole[n], n
    for n in cut_steps - {6}:  # what made them partial: most of their kernels are gone
        assert got[n] < 0.5 * whole[n], n


NESTED = r"^(ProfilerStep#\d+|forward)$"


def test_nested_step_annotations_take_the_level_asked() -> None:
    """The real CPU collector trace has a ``forward`` annotation inside each ProfilerStep:
    a pattern matching both takes the outermost (the ProfilerSteps) or, asked, the
    innermost (the forwards), and says how many nested matches it left out."""
    from explorer.analysis.steps import step_origin

    t = explorer.load(CNN)
    profiler = t.steps()
    forward = t.slices[(t.slices["name"] == "forward") & (t.slices["kind"] == "annotation")]
    t.use_steps(NESTED)
    assert t.steps()["name"].tolist() == profiler["name"].tolist()
    assert step_origin(t.data) == {
        "annotation": NESTED, "nesting": "outermost", "nested_left_out": len(forward)
    }  # fmt: skip
    t.use_steps(NESTED, nesting="innermost")
    st = t.steps()
    assert set(st["name"]) == {"forward"}
    assert sorted(st["start_ns"].tolist()) == sorted(forward["ts"].tolist())
    assert step_origin(t.data)["nested_left_out"] == len(profiler)
    with pytest.raises(UsageError, match="innermost"):
        t.use_steps(NESTED, nesting="middle")


def test_the_job_route_takes_the_same_step_options(tmp_path: Path) -> None:
    """A job's rank is analysed under the step options the single-trace route takes (the
    nesting too, which the job route once dropped): the same steps, in its stored table."""
    from explorer.job.rank_map import analyse_rank, rank_dir
    from explorer.store.entry import read_table
    from explorer.trace.step_options import StepOptions

    t = explorer.load(CNN)
    durations = []
    for options in (StepOptions(), StepOptions(NESTED, "innermost")):
        store = tmp_path / options.nesting
        assert analyse_rank(str(CNN), 0, str(store), False, options).error == ""
        stored = read_table(rank_dir(store, 0), "steps")
        single = t.with_steps(options.pattern, options.nesting).steps()
        assert stored["dur_ns"].tolist() == single["dur_ns"].tolist()
        durations.append(stored["dur_ns"].tolist())
    assert durations[0] != durations[1]  # the forwards, not the ProfilerSteps


@pytest.mark.parametrize("name", sorted(p.name for p in (CNN.parent).glob("*.pt.trace.json.gz")))
def test_whole_real_runs_have_no_partial_step(name: str) -> None:
    """The collector's sample runs stop after a whole step: none is partial — not even the
    steady compiled step after torch.compile's slow ones (short, but it runs its ops)."""
    t = explorer.load(CNN.parent / name)
    assert not t.steps()["partial"].any()
