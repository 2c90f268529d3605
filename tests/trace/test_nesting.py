"""Nesting on real traces: every parent contains its child, the fast parent search agrees
with a brute-force one, and the timeline rows follow the nesting without overlaps.

The traces are every trace in ``../shared/traces`` (captured by others on NVIDIA, AMD and
MTIA), every trace in ``sample_traces/`` (captured by our collector with Python stacks)
and a fresh capture made here with the collector's defaults (``with_stack=True``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import explorer
from explorer.trace.nesting import nest, timeline_rows
from tests.conftest import SAMPLE_TRACES, shared_trace_files

TRACES = sorted(SAMPLE_TRACES.glob("*.json.gz")) + shared_trace_files()


@pytest.fixture(scope="module")
def fresh_capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small training loop captured now with the collector's defaults (Python stacks
    on), with a user annotation around the forward pass."""
    out = tmp_path_factory.mktemp("capture")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with explorer.collect(out, sampler_interval_s=0.05) as c:
        for _ in range(3):
            with explorer.annotate("forward"):
                loss = model(torch.randn(16, 32)).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            c.step()
    assert c.trace_path is not None
    return c.trace_path


def _columns(trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    s = trace.slices
    return (
        s["track"].to_numpy(np.int64),
        s["ts"].to_numpy(np.int64),
        s["dur"].to_numpy(np.int64),
        s["parent"].to_numpy(np.int64),
        s["depth"].to_numpy(np.int64),
    )


def brute_parents(track: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """The definition, slice by slice: the shortest earlier slice on the track that
    contains the slice, the latest of equally short ones (a zero-length slice must fall
    strictly before its container's end)."""
    end = ts + dur
    idx = np.arange(len(ts))
    out = np.full(len(ts), -1, np.int64)
    for j in range(len(ts)):
        inside = (track == track[j]) & (idx < j) & (ts <= ts[j])
        inside &= (end > ts[j]) if dur[j] == 0 else (end >= end[j])
        hits = np.flatnonzero(inside)
        if len(hits):
            shortest = hits[dur[hits] == dur[hits].min()]
            out[j] = shortest[-1]
    return out


def assert_rows_sound(track, ts, dur, parent, rows) -> None:
    """Every child is on a row below its parent's, and no two slices of one row overlap
    (checked against the previous slice of the row only after sorting by start, which is
    enough: a row whose consecutive slices do not overlap has no overlapping pair)."""
    kids = np.flatnonzero(parent >= 0)
    assert (rows[kids] > rows[parent[kids]]).all()
    end = ts + dur
    order = np.lexsort((ts, rows, track))
    t, r, s, e = track[order], rows[order], ts[order], end[order]
    same = (t[1:] == t[:-1]) & (r[1:] == r[:-1])
    # A row is drawn left to right: a slice may start where the previous one ended.
    assert not (same & (s[1:] < e[:-1])).any()


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:40])
def test_every_parent_contains_its_child(path: Path) -> None:
    track, ts, dur, parent, depth = _columns(explorer.load(path))
    kids = np.flatnonzero(parent >= 0)
    p = parent[kids]
    end = ts + dur
    assert (track[p] == track[kids]).all()
    assert (ts[p] <= ts[kids]).all() and (end[p] >= end[kids]).all()
    assert (depth[kids] == depth[p] + 1).all() and (depth[parent < 0] == 0).all()


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:40])
def test_fast_nesting_agrees_with_brute_force(path: Path) -> None:
    trace = explorer.load(path)
    if len(trace.slices) > 30_000:
        pytest.fail(f"{path.name} grew past the brute force's budget; sample it instead")
    track, ts, dur, parent, _ = _columns(trace)
    np.testing.assert_array_equal(parent, brute_parents(track, ts, dur))


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:40])
def test_timeline_rows_follow_nesting_without_overlap(path: Path) -> None:
    track, ts, dur, parent, depth = _columns(explorer.load(path))
    assert_rows_sound(track, ts, dur, parent, timeline_rows(track, depth, ts, dur))


def test_fresh_capture_nests_and_annotations_sit_above_their_work(fresh_capture: Path) -> None:
    trace = explorer.load(fresh_capture)
    track, ts, dur, parent, depth = _columns(trace)
    assert trace.metadata["has_call_stack_args"] or (trace.slices["kind"] == "python").any()
    np.testing.assert_array_equal(parent, brute_parents(track, ts, dur))
    rows = timeline_rows(track, depth, ts, dur)
    assert_rows_sound(track, ts, dur, parent, rows)
    names = trace.slices["name"].astype(str).to_numpy()
    end = ts + dur
    for label in ("forward", "ProfilerStep#1"):
        ids = np.flatnonzero(names == label)
        assert len(ids), label
        for a in ids:
            # The annotation's own work (every slice on its track inside it, ignoring the
            # tiny frames around its start and end) is below it, and its parent holds it.
            inside = np.flatnonzero(
                (track == track[a]) & (ts > ts[a]) & (end < end[a]) & (dur > dur[a] // 10)
            )
            assert len(inside), label
            assert (rows[inside] > rows[a]).all(), label
            p = parent[a]
            assert p < 0 or (ts[p] <= ts[a] and end[p] >= end[a])


def test_profiler_step_of_the_cnn_sample_leaves_the_python_frame_it_starts_in() -> None:
    """The case from issue #10: ``ProfilerStep#0`` begins inside a 7 µs
    ``_record_function_enter_new`` frame and lasts 222 ms."""
    trace = explorer.load(SAMPLE_TRACES / "cpu_cnn.pt.trace.json.gz")
    s = trace.slices
    names = s["name"].astype(str).to_numpy()
    step = int(np.flatnonzero(names == "ProfilerStep#0")[0])
    p = int(s["parent"].iloc[step])
    assert p >= 0 and "_record_function_enter_new" not in names[p]
    assert int(s["dur"].iloc[p]) >= int(s["dur"].iloc[step])
    # Every step holds the training work of its step as children, including step 0,
    # which the training function's frame starts inside and outlives.
    for k in range(3):
        step = int(np.flatnonzero(names == f"ProfilerStep#{k}")[0])
        kids = np.flatnonzero(s["parent"].to_numpy() == step)
        assert int(s["dur"].to_numpy()[kids].sum()) > 0.9 * int(s["dur"].iloc[step]), k


def _random_sorted_slices(
    rng: np.random.Generator, n: int, tracks: int, span: int, longest: int, p: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` random slices on ``tracks`` tracks starting in ``[0, span)``, a share ``p``
    of them up to ``longest`` long and the rest zero-length, sorted by (track, ts, -dur)."""
    track = rng.integers(0, tracks, n)
    ts = rng.integers(0, span, n).astype(np.int64)
    dur = (rng.integers(0, longest, n) * (rng.random(n) < p)).astype(np.int64)
    order = np.lexsort((-dur, ts, track))
    return track[order], ts[order], dur[order]


def test_random_tracks_against_brute_force() -> None:
    """Random overlapping intervals, zero-length slices and shared starts included."""
    rng = np.random.default_rng(10)
    for trial in range(400):
        n = int(rng.integers(1, 50))
        track, ts, dur = _random_sorted_slices(rng, n, tracks=3, span=60, longest=30, p=0.85)
        depth, parent = nest(track, ts, dur)
        np.testing.assert_array_equal(parent, brute_parents(track, ts, dur), err_msg=str(trial))
        expect_depth = np.zeros(n, np.int64)
        for j in range(n):  # parents come first
            expect_depth[j] = expect_depth[parent[j]] + 1 if parent[j] >= 0 else 0
        np.testing.assert_array_equal(depth, expect_depth)
        rows = timeline_rows(track, depth, ts, dur)
        assert_rows_sound(track, ts, dur, parent, rows)
        # Zero-length slices may sit on a busy row only where nothing on it spans them.
        end = ts + dur
        for i in range(n):
            same = (track == track[i]) & (rows == rows[i]) & (np.arange(n) != i)
            assert not (same & (ts < end[i]) & (ts[i] < end)).any(), trial


@pytest.mark.parametrize("group", [1, 3, 8])
def test_random_tracks_nested_in_small_groups_against_brute_force(
    group: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Groups cut inside tracks too, wherever nothing earlier on the track is open (an
    earlier slice ending exactly there, zero-length slices at the cut, shared starts):
    the parents are still the brute force's."""
    from explorer.trace import nesting

    monkeypatch.setattr(nesting, "NEST_GROUP", group)
    rng = np.random.default_rng(11)
    cut_inside = 0
    for trial in range(400):
        n = int(rng.integers(1, 60))
        track, ts, dur = _random_sorted_slices(rng, n, tracks=2, span=200, longest=12, p=0.8)
        starts = nesting.independent_starts(track, ts, dur)
        cut_inside += int((np.r_[True, track[1:] != track[:-1]][starts] == 0).sum())
        _, parent = nest(track, ts, dur)
        np.testing.assert_array_equal(parent, brute_parents(track, ts, dur), err_msg=str(trial))
    assert cut_inside > 1000  # most groups were cut inside a track


@pytest.mark.parametrize("path", TRACES[:6], ids=lambda p: p.name)
@pytest.mark.parametrize("group", [1, 97, 1000])
def test_nesting_a_group_of_tracks_at_a_time_gives_the_whole_traces_answer(
    path: Path, group: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large trace is nested a group of whole tracks at a time (to bound the search's
    memory); with groups as small as one slice (each track on its own, the largest
    tracks larger than a group) the answer is the one-pass answer."""
    from explorer.trace import nesting

    track, ts, dur, _, _ = _columns(explorer.load(path, use_cache=False))
    whole_depth, whole_parent = nesting._nest(track, ts, dur)
    monkeypatch.setattr(nesting, "NEST_GROUP", group)
    depth, parent = nest(track, ts, dur)
    np.testing.assert_array_equal(parent, whole_parent)
    np.testing.assert_array_equal(depth, whole_depth)
    assert len(np.unique(track)) > 1  # several groups were nested


@pytest.mark.parametrize("seed", range(5))
def test_range_reduce_is_each_range_s_own_max_and_min(seed: int) -> None:
    """The sparse-table reduction that lanes' escapers and ``improperly_nested`` share:
    every non-empty ``[lo, hi)``'s max and min, against a slice of the values each."""
    from explorer.trace.nesting import range_reduce

    rng = np.random.default_rng(seed)
    values = rng.integers(-1000, 1000, int(rng.integers(1, 300)))
    lo = rng.integers(0, len(values), 200)
    hi = np.minimum(lo + rng.integers(1, len(values) + 1, 200), len(values))
    for op, whole in ((np.maximum, np.max), (np.minimum, np.min)):
        want = [whole(values[a:b]) for a, b in zip(lo, hi, strict=True)]
        assert range_reduce(values, lo, hi, op).tolist() == want
