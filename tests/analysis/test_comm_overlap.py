"""Communication hidden behind compute, per step and device, checked against a plain
merge of intervals (sorted, merged, intersected two pointers at a time) on real NCCL ranks,
and against the breakdown's communication on a real CPU DDP rank."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import explorer
from explorer.analysis.breakdown import (
    DEVICE_REASONS,
    breakdown,
    comm_overlap,
    device_slice_reasons,
    track_device_labels,
)
from explorer.analysis.steps import select_steps

ROOT = Path(__file__).resolve().parents[2]
NCCL_RANKS = ["timeline_analysis__sampled_rank-0.json.gz", "nccl_parser_config__nccl_data.json.gz"]


def _merged(starts: list[int], ends: list[int], w0: int, w1: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(zip(starts, ends, strict=True)):
        a, b = max(a, w0), min(b, w1)
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _intersection(x: list[tuple[int, int]], y: list[tuple[int, int]]) -> int:
    i = j = total = 0
    while i < len(x) and j < len(y):
        lo, hi = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        total += max(hi - lo, 0)
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return total


@pytest.mark.parametrize("name", NCCL_RANKS)
def test_device_overlap_matches_a_plain_interval_merge(shared_traces: Path, name: str) -> None:
    t = explorer.load(shared_traces / name).data
    got = comm_overlap(t)
    s = t.slices
    code = device_slice_reasons(t)
    reasons = [r for r, _ in DEVICE_REASONS]
    ts = s["ts"].to_numpy(np.int64).tolist()
    te = (s["ts"] + s["dur"]).to_numpy(np.int64).tolist()
    track = s["track"].to_numpy()
    labels = track_device_labels(t)
    steps = select_steps(t, None, attributed=True)
    assert len(got) and got["overlap_ns"].sum() > 0  # NCCL beside compute kernels
    for row in got.itertuples(index=False):
        tids = [k for k, v in labels.items() if v == row.device]
        on = np.isin(track, tids)
        st = steps[steps["step"] == row.step].iloc[0]
        w0, w1 = int(st["start_ns"]), int(st["end_ns"])
        pick = {
            k: np.flatnonzero(on & (code == reasons.index(k))) for k in ("dev_comm", "dev_compute")
        }
        comm = _merged([ts[i] for i in pick["dev_comm"]], [te[i] for i in pick["dev_comm"]], w0, w1)
        comp = _merged(
            [ts[i] for i in pick["dev_compute"]], [te[i] for i in pick["dev_compute"]], w0, w1
        )
        assert row.comm_ns == sum(b - a for a, b in comm), (row.step, row.device)
        assert row.overlap_ns == _intersection(comm, comp), (row.step, row.device)


def test_cpu_rank_communication_is_mostly_exposed() -> None:
    t = explorer.load(ROOT / "sample_traces/ddp_4rank_slow_input/rank0.pt.trace.json.gz").data
    got = comm_overlap(t).set_index("step")
    bd = breakdown(t)
    exposed = bd[bd["category"] == "communication"].set_index("step")["ns"]
    steps = select_steps(t, None, attributed=True).set_index("step")
    assert list(got["device"].unique()) == ["host"]
    for step, row in got.iterrows():
        assert 0 <= row["overlap_ns"] <= row["comm_ns"] <= steps.loc[step, "dur_ns"]
        # host mode ranks a collective above other threads' compute, so the breakdown's
        # communication is at most all of it, and here (gloo blocks the thread that calls
        # it; DDP's forward broadcast has nothing beside it) nearly all of it
        assert row["comm_ns"] - row["overlap_ns"] <= exposed[step] <= row["comm_ns"]
        assert row["overlap_ns"] < 0.05 * row["comm_ns"]


@pytest.mark.slow
def test_the_job_report_carries_it(tmp_path: Path) -> None:
    from explorer.job import job_document

    run = ROOT / "sample_traces/ddp_4rank_slow_input"
    doc = job_document(str(run), store=tmp_path / "s", workers=1)
    for r in doc["ranks"]:
        own = comm_overlap(explorer.load(run / f"rank{r['rank']}.pt.trace.json.gz").data)
        assert r["comm_ns"] == int(own["comm_ns"].sum())
        assert r["comm_overlap_ns"] == int(own["overlap_ns"].sum())
