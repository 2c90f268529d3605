"""Findings on a real torch.profiler run on the CPU, captured here under
``explorer.collect()``: a slow DataLoader is an input stall, a ``.item()`` per step is one
sync per step at its line (moved from tests/analysis, which runs without torch)."""

from __future__ import annotations

import inspect
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import explorer
from explorer.trace_api import Trace

STEPS = 4
SLEEP_S = 0.003
BATCH = 4


class SlowDataset(torch.utils.data.Dataset):
    """Each sample costs 3 ms of host time: the input pipeline is the bottleneck."""

    def __len__(self) -> int:
        return STEPS * BATCH

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(SLEEP_S)
        return torch.randn(32)


def _record(out_dir: Path) -> tuple[Path, int]:
    """A real CPU training loop under explorer.collect; returns (trace, line of .item())."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(SlowDataset(), batch_size=BATCH)
    item_line = 0
    with explorer.collect(out_dir, sampler_interval_s=0.05) as c:
        for x in loader:
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            item_line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
            loss.item()
            c.step()
    assert c.trace_path is not None
    return c.trace_path, item_line


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Trace, int]:
    path, item_line = _record(tmp_path_factory.mktemp("collect"))
    return explorer.load(path), item_line


def test_slow_dataloader_on_cpu_is_an_input_stall(real_run: tuple[Trace, int]) -> None:
    trace, _ = real_run
    found = trace.findings()
    assert found and found[0].kind == "input_stall"
    f = found[0]
    assert f.device == "host"
    # the time lost is the DataLoader's time inside the steps (nothing outranks it there),
    # plus the few µs of torch's loader frames just outside its annotation
    s = trace.slices
    loader = np.flatnonzero(
        s["name"].astype(str).str.startswith("enumerate(DataLoader)").to_numpy()
    )
    st = trace.steps()
    inside = 0
    for a, b in zip(st["start_ns"], st["end_ns"], strict=True):
        lo = np.maximum(s["ts"].to_numpy()[loader], a)
        hi = np.minimum((s["ts"] + s["dur"]).to_numpy()[loader], b)
        inside += int(np.clip(hi - lo, 0, None).sum())
    # and at most the time of every data-loading slice (the annotation and torch's
    # torch/utils/data frames around it) inside the steps, merged: on a busy machine
    # those frames outside the annotation can take milliseconds
    data = np.flatnonzero(
        s["name"].astype(str).str.startswith(("enumerate(DataLoader)", "torch/utils/data/"))
    )
    spans = []
    for a, b in zip(st["start_ns"], st["end_ns"], strict=True):
        lo = np.maximum(s["ts"].to_numpy()[data], a)
        hi = np.minimum((s["ts"] + s["dur"]).to_numpy()[data], b)
        spans += [(x, y) for x, y in zip(lo.tolist(), hi.tolist(), strict=True) if y > x]
    union, end = 0, -1
    for x, y in sorted(spans):
        union += max(0, y - max(x, end))
        end = max(end, y)
    assert inside <= f.time_lost_ns <= union
    # at least the sleeps of the batches fetched inside the steps
    assert f.time_lost_ns >= 0.9 * SLEEP_S * 1e9 * BATCH * (len(st) - 1)
    # evidence: the DataLoader annotations and torch's data-loading Python frames
    names = s["name"].astype(str).to_numpy()[np.array(f.evidence)]
    assert all(n.startswith(("enumerate(DataLoader)", "torch/utils/data/")) for n in names)
    # the annotation itself, or the torch/utils/data frame it runs inside (its parent)
    around = s["parent"].to_numpy()[loader]
    assert (set(loader.tolist()) | set(around.tolist())) & set(f.evidence)
    assert any(Path(file).name == Path(__file__).name for file, _, _ in f.source_lines)


def test_item_per_step_is_counted_at_its_line(real_run: tuple[Trace, int]) -> None:
    trace, item_line = real_run
    src = trace.by_source()
    here = src[
        (src["file"].map(lambda p: Path(p).name) == Path(__file__).name)
        & (src["line"] == item_line)
    ]
    assert len(here) == 1
    # one sync per step; the last step's .item() may fall after the last ProfilerStep
    assert STEPS - 1 <= int(here["sync_count"].iloc[0]) <= STEPS
    # on the CPU a .item() waits for nothing: it is not reported as a stall
    assert not [f for f in trace.findings() if f.kind == "sync_stall"]


def _nonzero_run(out_dir: Path, slow_steps: set[int]) -> Trace:
    """Six CPU steps of matmuls, each ending in a collector-hooked ``nonzero`` sync: over
    8M elements in ``slow_steps`` (tens of ms), over 8 elsewhere (µs)."""
    torch.manual_seed(0)
    a = torch.randn(256, 256)
    big = torch.rand(8_000_000) > 0.5
    small = torch.ones(8, dtype=torch.bool)
    with explorer.collect(out_dir, sampler_interval_s=0.05) as c:
        for i in range(6):
            for _ in range(20):
                a = torch.tanh(a @ a)
            (big if i in slow_steps else small).nonzero()
            c.step()
    assert c.trace_path is not None
    return explorer.load(c.trace_path)


def test_one_slow_sync_on_the_host_is_not_a_sync_stall(tmp_path: Path) -> None:
    # What a loaded CI machine did to one step's .item(): one sync, one step, 30%+ of the
    # run. On the host a sync waits for no device, so one slow one is not a habit of the code.
    one = _nonzero_run(tmp_path / "one", {0})
    per_step = one.breakdown()
    assert not [f for f in one.findings() if f.kind == "sync_stall"]
    # the time is still measured: step 0's sync time is in the breakdown, the others' tiny
    # (a loaded machine stretched one 8-element nonzero to 1.2 ms against 50 ms: the
    # typical one well under 1%, none near the slow one)
    sync = per_step[per_step["category"] == "sync_stall"].set_index("step")["ns"]
    others = sync.drop(0)
    assert sync[0] > 1_000_000 and others.median() < sync[0] / 100
    assert others.max() < sync[0] / 5
    # the same sync in every step is reported, with its time in every step
    every = _nonzero_run(tmp_path / "every", set(range(6)))
    (f,) = [f for f in every.findings() if f.kind == "sync_stall"]
    assert len(f.details["per_step_ns"]) == 6 and f.details["sync_count"] == 6
