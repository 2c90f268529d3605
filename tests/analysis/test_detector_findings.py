"""Findings on a real torch.profiler run on the CPU, the 2% threshold on hand-built
traces, and the Finding contract."""

from __future__ import annotations

import inspect
import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import explorer
from explorer.analysis.finding import Finding
from explorer.analysis.findings import findings
from explorer.trace.build import trace_from_events
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


def _step(idle_in_loader_us: float) -> list[dict]:
    """A 1 ms step: the GPU computes except for a DataLoader wait of the given length."""
    host, gpu = {"pid": 1, "tid": 1}, {"pid": 0, "tid": 7}
    ev = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#0",
            "ts": 0,
            "dur": 1000,
            **host,
        }
    ]
    ev.append({"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
               "ts": 0, "dur": idle_in_loader_us, **host})  # fmt: skip
    ev.append({"ph": "X", "cat": "kernel", "name": "gemm", "ts": idle_in_loader_us, "dur": 1000 - idle_in_loader_us,
               **gpu, "args": {"device": 0, "stream": 7}})  # fmt: skip
    return ev


def test_two_percent_threshold() -> None:
    assert findings(Trace(trace_from_events(_step(15)))) == []  # 1.5%: healthy
    (f,) = findings(Trace(trace_from_events(_step(30))))  # 3%: reported
    assert (f.kind, f.time_lost_ns, f.share, f.device) == ("input_stall", 30_000, 0.03, "cuda:0")
    assert f.ranges == [(0, 30_000)]


def test_finding_to_dict_is_plain_json() -> None:
    f = Finding(
        kind="sync_stall", title="t", time_lost_ns=np.int64(5), share=np.float64(0.5), steps=[np.int64(1)],
        ranges=[(np.int64(1), np.int64(2))], evidence=[np.int64(3)], source_lines=[("a.py", np.int64(4), "f")],
        explanation="e", recommendation="r", details={"n": np.int64(2)},
    )  # fmt: skip
    d = json.loads(json.dumps(f.to_dict()))
    assert d["source_lines"] == [{"file": "a.py", "line": 4, "function": "f"}]
    assert d["ranges"] == [[1, 2]] and d["details"] == {"n": 2} and d["time_lost_ns"] == 5


def _sample(sample_traces: Path, name: str) -> Trace:
    path = sample_traces / name
    if not path.exists():
        pytest.skip(f"{path} is not there (written by scripts/make_sample_traces.py)")
    return explorer.load(path)


def test_sample_slow_dataloader_is_an_input_stall_in_the_training_function(
    sample_traces: Path,
) -> None:
    t = _sample(sample_traces, "cpu_slow_dataloader.pt.trace.json.gz")
    found = t.findings()
    assert [f.kind for f in found] == ["input_stall"]
    assert found[0].share > 0.25  # 4 ms of sleep per sample; the model itself is tiny
    assert ("make_sample_traces.py", "_train_images") in {
        (Path(f).name, fn) for f, _, fn in found[0].source_lines
    }


def script_line(marker: str) -> int:
    """The line of scripts/make_sample_traces.py (which wrote the samples) holding ``marker``."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "make_sample_traces.py"
    (line,) = [i for i, t in enumerate(script.read_text().splitlines(), 1) if marker in t]
    return line


def test_sample_item_every_step_counts_one_sync_per_step_at_its_line(sample_traces: Path) -> None:
    t = _sample(sample_traces, "cpu_item_every_step.pt.trace.json.gz")
    src = t.by_source()
    line = script_line('print(f"loss {loss.item():.3f}")')
    row = src[
        (src["file"].map(lambda p: Path(p).name) == "make_sample_traces.py") & (src["line"] == line)
    ]
    assert row["sync_count"].tolist() == [len(t.steps())]
    # on the CPU neither the .item() nor the small DataLoader is a problem worth reporting
    assert t.findings() == []


def test_sample_compile_graph_break_names_the_break_line(sample_traces: Path) -> None:
    t = _sample(sample_traces, "cpu_compile_graph_break.pt.trace.json.gz")
    (f,) = [f for f in t.findings() if f.kind == "compile"]
    assert f.details["events"].get("graph_break", 0) >= 1
    assert script_line("if h.mean().item() > 0.25:") in {line for _, line, _ in f.source_lines}
    # the why names the break as a sentence, at that file:line, without dynamo's dumps
    why = f.explanation
    assert f"make_sample_traces.py:{script_line('if h.mean().item() > 0.25:')}" in why
    assert "\n" not in why and "User stack trace" not in why and "# ork/" not in why


@pytest.mark.parametrize("name", ["cpu_cnn.pt.trace.json.gz", "cpu_transformer.pt.trace.json.gz"])
def test_healthy_samples_have_no_finding(sample_traces: Path, name: str) -> None:
    assert _sample(sample_traces, name).findings() == []


def test_unlabelled_cpu_fallback_is_found_from_its_copy_pattern() -> None:
    """No collector event: an op whose only device work is a device→host copy, then (after
    CPU work) a host→device copy, is a CPU fallback; its copies are not a memcpy stall.
    Hand-built 1 ms step (synthetic): the op holds the device from 400 to 800 µs."""
    host, gpu = {"pid": 1, "tid": 1}, {"pid": 0, "tid": 7}

    def x(name: str, cat: str, ts: float, dur: float, where: dict, **args) -> dict:
        return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, **where, "args": args}

    ev = [
        x("ProfilerStep#0", "user_annotation", 0, 1000, host),
        x("cudaLaunchKernel", "cuda_runtime", 0, 5, host, correlation=1),
        x("gemm", "kernel", 5, 395, gpu, device=0, stream=7, correlation=1),
        x("aten::eig_cpu_only", "cpu_op", 400, 400, host),
        x("cudaMemcpyAsync", "cuda_runtime", 400, 30, host, correlation=2),
        x(
            "Memcpy DtoH (Device -> Pageable)",
            "gpu_memcpy",
            410,
            20,
            gpu,
            device=0,
            stream=7,
            correlation=2,
        ),
        x("cudaMemcpyAsync", "cuda_runtime", 765, 30, host, correlation=3),
        x(
            "Memcpy HtoD (Pageable -> Device)",
            "gpu_memcpy",
            770,
            20,
            gpu,
            device=0,
            stream=7,
            correlation=3,
        ),
        x("cudaLaunchKernel", "cuda_runtime", 800, 5, host, correlation=4),
        x("gemm", "kernel", 805, 195, gpu, device=0, stream=7, correlation=4),
    ]
    t = Trace(trace_from_events(ev))
    found = findings(t)
    assert [f.kind for f in found] == ["cpu_fallback"]
    (f,) = found
    op = int(np.flatnonzero((t.slices["name"] == "aten::eig_cpu_only").to_numpy())[0])
    assert f.evidence[0] == op and f.details["from_pattern"] == 1
    # copies (40 µs) + the device idle inside the op while the CPU computes (360 µs)
    assert f.time_lost_ns == 400_000 and f.share == pytest.approx(0.4)
