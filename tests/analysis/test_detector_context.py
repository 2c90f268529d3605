"""The detectors' shared context answers per-step questions with binary searches over the
tiled steps; on real traces every answer equals the plain per-step scan it replaces, and
steps that overlap (no tiling) take the scan. Likewise the per-category kind test and the
depth-ordered ``inherit_down`` equal their per-row definitions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import explorer
from explorer.analysis.breakdown import _covered
from explorer.analysis.detectors.context import Context
from explorer.trace.columns import category_in, category_values
from explorer.trace.model import KINDS

NEURON = "neuron_cnn.pt.trace.json.gz"
AMD = "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
HTA = "timeline_analysis__sampled_rank-0.json.gz"


def _scan_overlap(ctx: Context, device: str, reasons: tuple[str, ...], ids: np.ndarray):
    """Per id, and per step, ns of ``reasons`` inside the slice clipped to each step."""
    tl = ctx.timelines[device]
    per_id = np.zeros(len(ids), np.int64)
    per_step = np.zeros(len(ctx.steps), np.int64)
    for j, (s, e) in enumerate(zip(ctx.steps["start_ns"], ctx.steps["end_ns"], strict=True)):
        a = np.maximum(ctx.ts[ids], s)
        b = np.minimum(ctx.end[ids], e)
        ok = b > a
        if ok.any():
            for r in reasons:
                got = tl.reason_ns(r, a[ok], b[ok])
                per_id[ok] += got
                per_step[j] += int(got.sum())
    return per_id, per_step


def _check(ctx: Context, reason: str) -> int:
    """Compare every fast answer of ``ctx`` with the scan; the number of ids with time."""
    m = ctx.measure(reason)
    assert m is not None and m.total > 0
    tl = ctx.timelines[m.device]
    starts, ends = ctx.windows
    scanned = [tl.ranges(reason, int(s), int(e)) for s, e in zip(starts, ends, strict=True)]
    rng = np.concatenate(scanned)
    assert np.array_equal(m.ranges, rng[np.argsort(rng[:, 0], kind="stable")])
    ids = np.flatnonzero(ctx.outermost(~ctx.on_device & (ctx.end > ctx.ts)))
    per_id, per_step = _scan_overlap(ctx, m.device, (reason,), ids)
    assert np.array_equal(ctx.overlap(m, ids), per_id)
    assert np.array_equal(ctx.in_windows(m.device, reason, ids), per_step)
    inside = np.zeros(len(ctx.ts), bool)
    for s, e in zip(starts, ends, strict=True):
        inside |= (ctx.ts >= s) & (ctx.ts < e)
    assert np.array_equal(ctx.starts_in_steps, inside)
    return int((per_id > 0).sum())


def test_searches_equal_the_scan_on_a_device_sample(sample_traces: Path) -> None:
    ctx = Context(explorer.load(sample_traces / NEURON).data)
    assert len(ctx.steps) > 1 and ctx._tiled  # attributed steps tile time
    assert _check(ctx, "host_busy") > 0


@pytest.mark.parametrize("name", [AMD, HTA])
def test_searches_equal_the_scan_on_shared_traces(shared_traces: Path, name: str) -> None:
    ctx = Context(explorer.load(shared_traces / name).data)
    assert len(ctx.steps) > 1 and ctx._tiled
    assert _check(ctx, "host_busy") > 0


def test_overlap_measured_in_chunks_is_the_scan(
    sample_traces: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A few slices at a time (chunk boundaries inside every step's candidates): the
    same per-slice overlap as the scan."""
    from explorer.analysis.detectors import context

    monkeypatch.setattr(context, "OVERLAP_CHUNK", 7)
    ctx = Context(explorer.load(sample_traces / NEURON).data)
    assert _check(ctx, "host_busy") > 7


def test_overlapping_steps_take_the_scan(sample_traces: Path) -> None:
    ctx = Context(explorer.load(sample_traces / NEURON).data)
    steps = ctx.steps.copy()
    # every step reaches halfway into the next: no longer a tiling
    nxt = np.r_[steps["start_ns"].to_numpy()[1:], steps["end_ns"].iat[-1]]
    steps["end_ns"] = steps["end_ns"] + (nxt - steps["start_ns"].to_numpy()) // 2
    ctx.steps = steps
    assert not ctx._tiled
    assert _check(ctx, "host_busy") > 0


def test_host_mode_on_a_cpu_sample(sample_traces: Path) -> None:
    ctx = Context(explorer.load(sample_traces / "cpu_transformer.pt.trace.json.gz").data)
    assert ctx.device_mode is False and ctx._tiled
    assert _check(ctx, "host_compute") > 0


def test_kind_in_is_isin_of_the_values(sample_traces: Path, shared_traces: Path) -> None:
    for path in (sample_traces / "cpu_slow_dataloader.pt.trace.json.gz", shared_traces / AMD):
        data = explorer.load(path).data
        values = category_values(data.slices["kind"])
        for kinds in (("kernel", "collective"), ("runtime",), KINDS, ("not a kind",)):
            assert np.array_equal(data.kind_in(*kinds), np.isin(values, list(kinds)))
        names = data.slices["name"]
        some = [str(n) for n in names.cat.categories[::7]]
        assert np.array_equal(category_in(names, some), np.isin(category_values(names), some))
        assert category_in(names, some).any()


def test_inherit_down_is_the_walk_to_the_nearest_kept_ancestor(sample_traces: Path) -> None:
    data = explorer.load(sample_traces / "cpu_cnn.pt.trace.json.gz").data
    parent = data.slices["parent"].to_numpy(np.int64)
    keep = data.kind_in("python", "annotation")
    values = np.where(keep, np.arange(len(parent)), -1)
    got = data.inherit_down(values, keep)
    want = values.copy()
    for i in range(len(parent)):  # parents come before their children
        if not keep[i] and parent[i] >= 0:
            want[i] = want[parent[i]]
    assert np.array_equal(got, want)
    assert (got >= 0).sum() > keep.sum()  # values did flow down


@pytest.mark.parametrize("name", [NEURON, "cpu_item_every_step.pt.trace.json.gz"])
def test_reason_time_is_the_dense_sum(sample_traces: Path, name: str) -> None:
    """Each reason's time in any window, from the reason's own segments, is the sum over
    every segment masked by the reason (the dense formula), to the ns."""
    ctx = Context(explorer.load(sample_traces / name).data)
    rng = np.random.default_rng(0)
    for tl in ctx.timelines.values():
        lo, hi = int(tl.bounds[0]) - 10, int(tl.bounds[-1]) + 10
        a = rng.integers(lo, hi, 2000)
        b = a + rng.integers(0, (hi - lo) // 3, 2000)
        a = np.r_[a, tl.bounds[:-1], ctx.ts]  # segment edges and slice starts exactly
        b = np.r_[b, tl.bounds[1:], ctx.end]
        nonzero = 0
        for k, (reason, _) in enumerate(tl.reasons):
            got = tl.reason_ns(reason, a, b)
            assert np.array_equal(got, _covered(tl.bounds, tl.seg == k, a, b))
            nonzero += int((got > 0).sum())
        assert nonzero > 0
