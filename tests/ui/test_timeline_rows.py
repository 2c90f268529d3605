"""Timeline rows on real traces with Python stacks: every annotation is a bar of its own,
above the work it holds, and no two slices share a row where they overlap (issue #10:
``ProfilerStep#0`` shared its row with 57 Python frames and could not be seen)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import explorer
from explorer.ui.timeline.colors import color_ids
from explorer.ui.timeline.layout import TrackLayout
from explorer.ui.timeline.lod import build_lanes, lane_slice_at
from tests.conftest import SAMPLE_TRACES

SAMPLES = sorted(SAMPLE_TRACES.glob("*.json.gz"))


def _lanes(trace):
    s = trace.slices
    return build_lanes(s, color_ids(s["kind"], s["name"]))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name[:30])
def test_no_two_slices_of_a_lane_overlap(path: Path) -> None:
    trace = explorer.load(path)
    lanes = _lanes(trace)
    dur = trace.slices["dur"].to_numpy()
    for lane in range(len(lanes.lane_track)):
        a, b = int(lanes.lane_start[lane]), int(lanes.lane_start[lane + 1])
        ts = lanes.ts[a:b]
        end = ts + dur[lanes.order[a:b]]
        assert (ts[1:] >= end[:-1]).all(), (path.name, lane)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name[:30])
def test_annotations_are_bars_above_their_work(path: Path) -> None:
    trace = explorer.load(path)
    s = trace.slices
    lanes = _lanes(trace)
    layout = TrackLayout(trace, lanes)
    parent = s["parent"].to_numpy()
    lane_of = lanes.lane_of(np.arange(len(s)))
    steps = np.flatnonzero(s["name"].astype(str).str.startswith("ProfilerStep#").to_numpy())
    assert len(steps) >= 3
    for step in steps:
        mid = int(s["ts"].iloc[step]) + int(s["dur"].iloc[step]) // 2
        # Hovering the middle of the step's bar finds the step itself.
        assert lane_slice_at(lanes, int(lane_of[step]), mid, 0) == step
        kids = np.flatnonzero(parent == step)
        assert len(kids)
        row = layout.row_of_track(int(s["track"].iloc[step]))
        assert row is not None
        ys = [layout.lane_y(row, int(lane)) for lane in lane_of[kids]]
        assert min(ys) > layout.lane_y(row, int(lane_of[step]))
