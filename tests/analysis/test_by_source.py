"""by_source: per user line, host/device/stall time, bytes, fallbacks and syncs — checked
against what the synthetic scenarios planted (counts and bytes are exact)."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.analysis.by_source import BY_SOURCE_COLUMNS, by_source
from explorer.scenarios import generate
from explorer.trace.build import trace_from_events
from explorer.trace_api import Trace

TRAIN = "/synthetic/train.py"
STEPS = 3


def _trace(name: str) -> Trace:
    doc = generate(name, steps=STEPS, seed=0)
    return Trace(
        trace_from_events(doc["traceEvents"], {k: v for k, v in doc.items() if k != "traceEvents"})
    )


def _row(df, line: int) -> dict:
    r = df[(df["file"] == TRAIN) & (df["line"] == line)]
    assert len(r) == 1, df[["file", "line", "function"]]
    return r.iloc[0].to_dict()


@pytest.fixture(scope="module")
def sync_storm() -> Trace:
    return _trace("sync_storm")


def test_columns_and_order(sync_storm: Trace) -> None:
    df = by_source(sync_storm)
    assert list(df.columns) == BY_SOURCE_COLUMNS
    total = (df["host_ns"] + df["device_ns"]).to_numpy()
    assert (np.diff(total) <= 0).all()


def test_syncs_stall_and_bytes_at_the_check_line(sync_storm: Trace) -> None:
    r = _row(by_source(sync_storm), 75)
    assert r["function"] == "check_finite"
    assert r["sync_count"] == 8 * STEPS  # one .item() per layer, 8 layers, every step
    assert r["copy_bytes"] == 8 * STEPS  # each .item() copies one byte back
    assert r["stall_ns"] > 0 and r["device_ns"] > 0


def test_device_time_is_all_attributed_and_host_time_never_double_counted(
    sync_storm: Trace,
) -> None:
    t = sync_storm
    df = by_source(t)
    s = t.slices
    dev = np.isin(s["track"].to_numpy(), t.device_tracks()["id"].to_numpy())
    work = dev & np.isin(
        s["kind"].to_numpy().astype(str), ["kernel", "memcpy", "memset", "collective"]
    )
    assert df["device_ns"].sum() == s["dur"].to_numpy()[work].sum()
    # exclusive host time fits in the host threads' busy time
    host_tracks = t.host_tracks()["id"].to_numpy()
    busy = 0
    for tr in host_tracks:
        m = (s["track"].to_numpy() == tr) & (s["depth"].to_numpy() == 0)
        busy += int(s["dur"].to_numpy()[m].sum())
    assert 0 < df["host_ns"].sum() <= busy


def test_fallbacks_and_pageable_copies_are_counted_at_their_lines() -> None:
    fb = _row(by_source(_trace("cpu_fallback")), 55)
    assert fb["fallback_count"] == STEPS and fb["function"] == "augment"
    t = _trace("pageable_copies")
    s = t.slices
    htod = (s["copy_kind"] == "HtoD").to_numpy() & (s["kind"] == "memcpy").to_numpy()
    cp = _row(by_source(t), 30)
    assert cp["copy_bytes"] == int(s["bytes"].to_numpy()[htod].sum()) > 0


def test_collector_syncs_count_once_at_their_exact_line() -> None:
    """The `.item()`-every-step sample (a real CPU run of the collector): each sync counts
    once, at the line that called `.item()`, not again through the aten::item op inside it
    (which torch's stack places on the enclosing function's first line)."""
    from pathlib import Path

    import explorer

    path = (
        Path(__file__).resolve().parents[2]
        / "sample_traces"
        / "cpu_item_every_step.pt.trace.json.gz"
    )
    t = explorer.load(path, use_cache=False)
    src = t.by_source()
    script = src[src["file"].astype(str).str.endswith("make_sample_traces.py")]
    lines = dict(zip(script["line"], script["sync_count"], strict=True))
    n_steps = len(t.steps())
    from tests.analysis.test_detector_findings import script_line

    assert lines[script_line('print(f"loss {loss.item():.3f}")')] == n_steps
    # the enclosing function's first line (where torch's stack puts aten::item): no double count
    assert lines.get(script_line("def _train_images("), 0) == 0


def _nested(rng: np.random.Generator, lo: int, hi: int, depth: int, out: list) -> None:
    """Random properly nested intervals inside ``[lo, hi)``, down to ``depth`` levels:
    mostly one child (deep stacks), sometimes two or three, each its piece of the parent's
    time a few ns in from the piece's ends (some touch or share a parent's start)."""
    if depth == 0 or hi - lo < 8:
        return
    k = 1 if rng.random() < 0.85 else int(rng.integers(2, 4))
    cuts = np.linspace(lo, hi, k + 1).astype(int)
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        a2, b2 = int(a) + int(rng.integers(0, 3)), int(b) - int(rng.integers(0, 3))
        if b2 - a2 < 2 or rng.random() < 0.02:
            continue
        out.append((a2, b2))
        _nested(rng, a2, b2, depth - 1, out)


@pytest.mark.parametrize("seed", range(3))
def test_exclusive_time_matches_painting_the_deepest_slice(seed: int) -> None:
    """Deep stacks (up to 50 levels, as real Python stacks are) on three threads: each
    slice's exclusive time is the count of nanoseconds where it is the deepest slice
    running, painted one by one."""
    from explorer.analysis.by_source import exclusive_ns

    rng = np.random.default_rng(seed)
    events, spans = [], []
    for tid in (1, 2, 3):
        iv: list = []
        _nested(rng, 0, 20_000, 50 if tid == 1 else 6, iv)
        for a, b in iv:
            events.append(
                {"ph": "X", "name": f"f{len(events)}", "cat": "cpu_op", "ts": a / 1000,
                 "dur": (b - a) / 1000, "pid": 1, "tid": tid}
            )  # fmt: skip
            spans.append((tid, a, b))
    t = trace_from_events(events)
    got = exclusive_ns(t, t.on_host())
    s = t.slices
    assert int(s["depth"].max()) >= 20  # deep enough for the sweep's per-level passes
    want = np.zeros(len(s), np.int64)
    ts, end, track, depth = (s[c].to_numpy(np.int64) for c in ("ts", "dur", "track", "depth"))
    end = ts + end
    for tr in np.unique(track):
        mine = np.flatnonzero(track == tr)
        owner = np.full(int(end[mine].max()) + 1, -1)
        for i in mine[np.argsort(depth[mine], kind="stable")]:  # deeper painted later
            owner[ts[i] : end[i]] = i
        counts = np.bincount(owner[owner >= 0], minlength=len(s))
        want += counts
    assert got.tolist() == want.tolist()
