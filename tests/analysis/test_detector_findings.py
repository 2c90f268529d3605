"""Findings on the sample traces, the 2% threshold on hand-built traces, and the Finding
contract (the findings of a run captured here are in tests/collect/test_capture_findings.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import explorer
from explorer.analysis.finding import Finding
from explorer.analysis.findings import findings
from explorer.trace.build import trace_from_events
from explorer.trace_api import Trace


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
