"""The collector on real CPU training loops: what it writes, and how it behaves when misused.

Everything here runs torch.profiler for real. Where a test needs an accelerator that this
machine lacks, it says what stands in for it (the ``meta`` device for a device copy).
"""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import explorer
from explorer.errors import ExplorerError
from tests.collect.trace_reading import explorer_events, read_trace


def _line_after() -> int:
    """The line number right after the caller's line (where the call under test sits)."""
    return inspect.currentframe().f_back.f_lineno + 1  # type: ignore[union-attr]


def _train(c, steps: int = 3) -> list[int]:
    """A small MLP trained for a few steps; returns the line of the per-step ``.item()``."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    lines = []
    for _ in range(steps):
        with explorer.annotate("forward"):
            loss = model(torch.randn(16, 32)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        lines.append(_line_after())
        loss.item()
        c.step()
    return lines


def test_training_loop_trace_is_plain_kineto_json_with_steps_counters_and_environment(
    tmp_path: Path,
) -> None:
    with explorer.collect(tmp_path, sampler_interval_s=0.01) as c:
        lines = _train(c, steps=3)
    path = c.trace_path
    assert path is not None and path.name.endswith(".pt.trace.json.gz") and path.parent == tmp_path
    assert "rank0" in path.name
    doc = read_trace(path)
    names = [e.get("name") for e in doc["traceEvents"]]
    # one marker per c.step(); the tail after the last c.step() is not a step
    assert sorted(n for n in names if str(n).startswith("ProfilerStep#")) == [
        "ProfilerStep#0",
        "ProfilerStep#1",
        "ProfilerStep#2",
    ]
    assert names.count("forward") >= 3
    env = doc["explorer"]["environment"]
    assert env["torch_version"] == str(torch.__version__)
    assert env["python_version"] == sys.version.split()[0]
    assert env["world_size"] == 1 and env["rank"] == 0
    assert env["argv"] == sys.argv
    assert doc["explorer"]["settings"]["with_stack"] is True
    counters = explorer_events(doc, "explorer_system")
    assert {e["name"] for e in counters} >= {"CPU %", "Host memory"}
    assert all(e["ph"] == "C" for e in counters)
    # the sampler is invisible to the profiler: no psutil frames, no extra traced thread
    py = [e for e in doc["traceEvents"] if e.get("cat") == "python_function"]
    assert py and not any("psutil" in e["name"] for e in py)
    # the training thread is traced (where its syncs are); any other traced thread is not
    # the sampler's (a thread an earlier test left running in this process may be traced)
    main_tid = {item["tid"] for item in explorer_events(doc, "explorer_sync")}
    assert len(main_tid) == 1 and main_tid <= {e["tid"] for e in py}
    for tid in {e["tid"] for e in py} - main_tid:
        assert not any("explorer/collect" in e["name"] for e in py if e["tid"] == tid), (
            f"the collector's own code is traced on thread {tid}"
        )
    rss = [e["args"]["process_rss_bytes"] for e in counters if e["name"] == "Host memory"]
    assert min(rss) > 10_000_000  # a python process with torch loaded
    syncs = explorer_events(doc, "explorer_sync")
    item_syncs = [s for s in syncs if s["args"]["reason"] == ".item()"]
    assert len(item_syncs) == 3
    assert {(s["args"]["source_file"], s["args"]["source_line"]) for s in item_syncs} == {
        (__file__, lines[0])
    }
    assert all(s["args"]["source_function"] == "_train" for s in item_syncs)


def test_item_sync_is_on_the_profiler_clock_and_thread(tmp_path: Path) -> None:
    """The sync slice must enclose the ``aten::item`` op it caused: same clock, same track."""
    with explorer.collect(tmp_path, with_stack=False, sampler_interval_s=None) as c:
        _train(c, steps=3)
    doc = read_trace(c.trace_path)
    ops = [e for e in doc["traceEvents"] if e.get("name") == "aten::item" and e.get("ph") == "X"]
    syncs = [s for s in explorer_events(doc, "explorer_sync") if s["args"]["reason"] == ".item()"]
    assert len(ops) == len(syncs) == 3
    for op, sync in zip(
        sorted(ops, key=lambda e: e["ts"]), sorted(syncs, key=lambda e: e["ts"]), strict=True
    ):
        assert (sync["pid"], sync["tid"]) == (op["pid"], op["tid"])
        assert sync["ts"] <= op["ts"] + 0.002
        assert op["ts"] + op["dur"] <= sync["ts"] + sync["dur"] + 0.002
        assert sync["dur"] < 50_000  # µs: the same call, not a misaligned clock


def test_explorer_load_reads_collected_kinds_counters_and_steps(tmp_path: Path) -> None:
    with explorer.collect(tmp_path, with_stack=False, sampler_interval_s=0.01) as c:
        _train(c, steps=3)
        x = torch.randn(8, 8)
        x.to("meta")  # meta stands in for an accelerator: a host→device copy
        c.step()
    trace = explorer.load(c.trace_path, use_cache=False)
    kinds = trace.slices["kind"].astype(str).value_counts()
    assert kinds.get("sync", 0) >= 3 and kinds.get("copy", 0) == 1
    assert len(trace.counters) > 0
    assert trace.metadata["explorer"]["environment"]["torch_version"] == str(torch.__version__)
    steps = trace.steps()
    assert list(steps["name"]) == [f"ProfilerStep#{i}" for i in range(4)]
    assert (steps["dur_ns"] > 0).all()


def test_copies_to_meta_record_bytes_direction_and_line(tmp_path: Path) -> None:
    """No accelerator here: the ``meta`` device stands in for one. ``.to("meta")`` and
    ``meta.copy_(cpu)`` cross devices exactly like a host→device copy would."""
    src = torch.randn(64, 32)
    with explorer.collect(tmp_path, with_stack=False, sampler_interval_s=None) as c:
        line_to = _line_after()
        dev = src.to("meta")
        line_copy = _line_after()
        dev.copy_(src)
        src.to(torch.float64)  # same device: not a copy
        c.step()
    copies = explorer_events(read_trace(c.trace_path), "explorer_copy")
    assert [(e["args"]["call"], e["args"]["source_line"]) for e in copies] == [
        (".to()", line_to),
        ("copy_", line_copy),
    ]
    for e in copies:
        assert e["args"]["bytes"] == src.nbytes
        assert e["args"]["copy_kind"] == "HtoD"
        assert e["args"]["src_device"] == "cpu" and e["args"]["dst_device"] == "meta"
        assert e["args"]["blocking"] is True and e["args"]["pinned"] is False
        assert e["args"]["source_file"] == __file__


def test_other_sync_points_print_tolist_nonzero(tmp_path: Path) -> None:
    x = torch.tensor([0.0, 1.0, 2.0])
    with explorer.collect(tmp_path, with_stack=False, sampler_interval_s=None) as c:
        x.tolist()
        torch.nonzero(x)
        x.nonzero()
        repr(x)  # what print() does; its inner .tolist()/.item() calls are not counted again
        c.step()
    reasons = [
        e["args"]["reason"] for e in explorer_events(read_trace(c.trace_path), "explorer_sync")
    ]
    assert reasons == [".tolist()", "nonzero", "nonzero", "print(tensor)"]


class _FallbackTensor(torch.Tensor):
    """Stands in for a backend with CPU fallbacks: every ``sin`` "falls back" — warns the way
    MPS/XLA/PrivateUse1 backends do, then runs on the CPU."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        import warnings

        if func in (torch.sin, torch.Tensor.sin):
            warnings.warn(
                "The operator 'aten::sin.out' is not currently supported on the FAKE backend "
                "and will fall back to run on the CPU.",
                UserWarning,
                stacklevel=2,
            )
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


def test_fallback_warnings_and_log_lines_are_recorded_and_still_shown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    x = torch.randn(4).as_subclass(_FallbackTensor)
    with explorer.collect(tmp_path, with_stack=False, sampler_interval_s=None) as c:
        with pytest.warns(UserWarning, match="fall back to run on the CPU"):
            line_warn = _line_after()
            torch.sin(x)
        with caplog.at_level(logging.WARNING, logger="fake_backend"):
            line_log = _line_after()
            logging.getLogger("fake_backend").warning("aten::cumsum executed via CPU fallback")
        c.step()
    assert "executed via CPU fallback" in caplog.text  # passed on, not swallowed
    events = explorer_events(read_trace(c.trace_path), "explorer_fallback")
    assert [(e["args"]["op"], e["args"]["via"], e["args"]["source_line"]) for e in events] == [
        ("aten::sin.out", "warning", line_warn),
        ("aten::cumsum", "log:fake_backend", line_log),
    ]
    assert events[0]["args"]["device"] == "fake"


def test_exception_inside_block_writes_readable_trace_and_propagates(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="boom"):
        with explorer.collect(tmp_path, sampler_interval_s=None) as c:
            _train(c, steps=2)
            raise ValueError("boom")
    doc = read_trace(c.trace_path)
    assert sum(1 for e in doc["traceEvents"] if e.get("name") == "aten::addmm") >= 2
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_never_overwrites_an_existing_trace(tmp_path: Path) -> None:
    paths = []
    for _ in range(2):
        with explorer.collect(
            tmp_path, name="same", with_stack=False, sampler_interval_s=None
        ) as c:
            torch.randn(4).sum().item()
            c.step()
        paths.append(c.trace_path)
    first_bytes = paths[0].read_bytes()
    assert [p.name for p in paths] == ["same.pt.trace.json.gz", "same_1.pt.trace.json.gz"]
    assert paths[0].read_bytes() == first_bytes


def test_unwritable_output_directory_fails_at_entry(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    with pytest.raises(ExplorerError, match="cannot create output directory"):
        explorer.collect(blocker / "runs")


def test_step_outside_the_block_is_a_clear_error(tmp_path: Path) -> None:
    c = explorer.collect(tmp_path, sampler_interval_s=None)
    with pytest.raises(ExplorerError, match="outside"):
        c.step()
    with c:
        c.step()
    with pytest.raises(ExplorerError, match="outside"):
        c.step()
    with pytest.raises(ExplorerError, match="already recorded"):
        with c:
            pass


def test_hooks_are_removed_after_the_block_and_can_be_switched_off(tmp_path: Path) -> None:
    originals = (torch.Tensor.item, torch.Tensor.to, torch.Tensor.__repr__, torch.nonzero)
    with explorer.collect(tmp_path, hooks=False, with_stack=False, sampler_interval_s=None) as c:
        assert torch.Tensor.item is originals[0]
        torch.randn(3).sum().item()
        c.step()
    assert explorer_events(read_trace(c.trace_path), "explorer_sync") == []
    with explorer.collect(tmp_path, with_stack=False, sampler_interval_s=None):
        assert torch.Tensor.item is not originals[0]
    assert (torch.Tensor.item, torch.Tensor.to, torch.Tensor.__repr__, torch.nonzero) == originals


def test_hooks_do_not_change_results(tmp_path: Path) -> None:
    torch.manual_seed(1)
    x = torch.randn(5, 3)
    expected = (
        x.sum().item(),
        x.tolist(),
        torch.nonzero(x > 0).tolist(),
        repr(x),
        x.to(torch.float64),
    )
    with explorer.collect(tmp_path, with_stack=False, sampler_interval_s=None):
        got = (
            x.sum().item(),
            x.tolist(),
            torch.nonzero(x > 0).tolist(),
            repr(x),
            x.to(torch.float64),
        )
    assert got[:4] == expected[:4]
    assert torch.equal(got[4], expected[4])


def test_step_range_schedule_records_only_those_steps(tmp_path: Path) -> None:
    with explorer.collect(
        tmp_path, schedule=range(2, 4), with_stack=False, sampler_interval_s=None
    ) as c:
        _train(c, steps=5)
    doc = read_trace(c.trace_path)
    steps = sorted(
        {e["name"] for e in doc["traceEvents"] if str(e.get("name")).startswith("ProfilerStep#")}
    )
    assert steps == ["ProfilerStep#2", "ProfilerStep#3"]
    syncs = explorer_events(doc, "explorer_sync")
    assert len(syncs) == 2  # the .item() of steps 0, 1 and 4 fall outside the recorded window
    lo = min(e["ts"] for e in doc["traceEvents"] if e.get("name") == "ProfilerStep#2")
    assert all(s["ts"] >= lo for s in syncs)


def test_sigterm_inside_block_still_writes_the_trace(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os, signal, torch, explorer
        with explorer.collect({str(tmp_path)!r}, with_stack=False, sampler_interval_s=None) as c:
            torch.randn(8).sum().item()
            c.step()
            os.kill(os.getpid(), signal.SIGTERM)
            while True:
                torch.randn(8).sum()
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == -15, proc.stderr
    written = list(tmp_path.glob("*.pt.trace.json.gz"))
    assert len(written) == 1
    doc = read_trace(written[0])
    assert len(explorer_events(doc, "explorer_sync")) == 1
    assert not np.isnan(doc["explorer"]["elapsed_ns"])


def test_keyboard_interrupt_inside_block_writes_trace_and_propagates(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        with explorer.collect(tmp_path, with_stack=False, sampler_interval_s=None) as c:
            _train(c, steps=1)
            raise KeyboardInterrupt
    assert len(explorer_events(read_trace(c.trace_path), "explorer_sync")) == 1


def test_missing_activity_warns_and_records_what_exists(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match="cannot profile CUDA"):
        c = explorer.collect(
            tmp_path, activities=["cpu", "cuda"], with_stack=False, sampler_interval_s=None
        )
    assert c.settings["activities"] == ["CPU"]
    with c:
        _train(c, steps=1)
    assert read_trace(c.trace_path)["explorer"]["settings"]["activities"] == ["CPU"]


def test_dict_schedule_wait_warmup_active(tmp_path: Path) -> None:
    schedule = {"wait": 1, "warmup": 1, "active": 2, "repeat": 1}
    with explorer.collect(
        tmp_path, schedule=schedule, with_stack=False, sampler_interval_s=None
    ) as c:
        _train(c, steps=6)
    names = {
        e["name"]
        for e in read_trace(c.trace_path)["traceEvents"]
        if str(e.get("name")).startswith("ProfilerStep#")
    }
    assert names == {"ProfilerStep#2", "ProfilerStep#3"}
    with pytest.raises(ExplorerError, match="unknown schedule keys"):
        explorer.collect(tmp_path, schedule={"wiat": 1})


def test_kineto_names_with_unescaped_quotes_are_repaired() -> None:
    """Kineto writes a module-level frame's name with its docstring quotes unescaped (seen
    in a real capture: ``torch/profiler/_cupti_monitor.py(0):     \"\"\"``)."""
    from explorer.trace.decode import repair_unescaped_strings

    raw = (
        b'{"traceEvents": [\n  {\n    "ph": "X",\n    "cat": "python_function",\n'
        b'    "name": "torch/profiler/_cupti_monitor.py(0):     """",\n'
        b'    "ts": 1.0,\n    "dur": 2.0\n  },\n  {\n    "ph": "X",\n    "name": "ok \\"quoted\\"",\n'
        b'    "ts": 3.0\n  }\n]}'
    )
    with pytest.raises(ValueError):
        import json

        json.loads(raw)
    import json

    doc = json.loads(repair_unescaped_strings(raw))
    assert [e["name"] for e in doc["traceEvents"]] == [
        'torch/profiler/_cupti_monitor.py(0):     """',
        'ok "quoted"',
    ]


class _StandInAccelerator(torch.Tensor):
    """Stands in for an accelerator backend without the operator kernels: a tensor that
    claims device ``meta`` and runs every op through a CPU fallback the way
    ``at::native::cpu_fallback`` does — ``aten::_to_cpu`` on the inputs, then the CPU kernel."""

    @staticmethod
    def __new__(cls, inner: torch.Tensor):  # noqa: ANN204
        return torch.Tensor._make_wrapper_subclass(
            cls, inner.shape, dtype=inner.dtype, device=torch.device("meta")
        )

    def __init__(self, inner: torch.Tensor) -> None:
        self.inner = inner

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        from torch.utils._pytree import tree_map

        moved = iter(torch.ops.aten._to_cpu.default([a.inner for a in args if isinstance(a, cls)]))
        cpu_args = [next(moved) if isinstance(a, cls) else a for a in args]
        out = func(*cpu_args, **(kwargs or {}))
        return tree_map(lambda t: cls(t) if isinstance(t, torch.Tensor) else t, out)


def test_ops_that_ran_through_the_cpu_fallback_are_found_in_the_profiler_events(
    tmp_path: Path,
) -> None:
    x = _StandInAccelerator(torch.randn(16))
    with explorer.collect(tmp_path, with_stack=False, sampler_interval_s=None) as c:
        y = torch.sin(x)
        (y + x).sum()
        c.step()
    doc = read_trace(c.trace_path)
    found = explorer_events(doc, "explorer_fallback")
    assert [e["args"]["op"] for e in found] == ["aten::sin", "aten::add", "aten::sum"]
    ops = {(e["name"], e["ts"], e["dur"]) for e in doc["traceEvents"] if e.get("cat") == "cpu_op"}
    assert all((e["args"]["op"], e["ts"], e["dur"]) in ops for e in found)  # exactly over the op
    assert doc["explorer"]["fallbacks_from_profiler"] == 3
    trace = explorer.load(c.trace_path, use_cache=False)
    assert (trace.slices["kind"].astype(str) == "fallback").sum() == 3
    # a run without a fallback has none
    with explorer.collect(tmp_path, with_stack=False, sampler_interval_s=None) as c2:
        torch.sin(torch.randn(16))
    assert explorer_events(read_trace(c2.trace_path), "explorer_fallback") == []


@pytest.mark.parametrize(
    ("message", "is_fallback"),
    [
        # MPS, PrivateUse1-style and XLA-style wordings
        (
            "The operator 'aten::nonzero' is not currently supported on the MPS backend and will fall back to run on the CPU. This may have performance implications.",
            True,
        ),
        ("aten::_unique2 executed via CPU fallback", True),
        ("Op aten::index_put_ falling back to CPU", True),
        ("Warning: CPU fallback for aten::median", True),
        # not fallbacks to the CPU
        ("torch._dynamo hit config.recompile_limit; falling back to eager", False),
        ("Triton autotuning failed, falling back to the default config", False),
        ("Gradients will be None", False),
    ],
)
def test_fallback_message_pattern(message: str, is_fallback: bool) -> None:
    from explorer.collect.fallback_capture import FALLBACK_MESSAGE, fallback_args

    assert bool(FALLBACK_MESSAGE.search(message)) is is_fallback
    if is_fallback:
        assert fallback_args(message)["op"].startswith("aten::")


def test_non_blocking_copy_and_accelerator_run_sync_filter(tmp_path: Path) -> None:
    """``non_blocking=True`` is recorded as such; with an accelerator present (``cpu_syncs``
    off) a CPU tensor's ``.item()`` is not a sync and is left out, while ``synchronize()``
    calls are always recorded — even one that fails, as on this CPU-only machine, is not."""
    from explorer.collect.event_buffer import EventBuffer
    from explorer.collect.runtime_hooks import RuntimeHooks

    buffer = EventBuffer()
    hooks = RuntimeHooks(buffer, cpu_syncs=False)
    hooks.install()
    try:
        torch.randn(8).to("meta", non_blocking=True)
        torch.randn(3).sum().item()
        with pytest.raises(RuntimeError):
            torch.accelerator.synchronize()  # no accelerator here: raises, records nothing
    finally:
        hooks.uninstall()
    assert [(e["cat"], e["args"].get("blocking")) for e in buffer.events] == [
        ("explorer_copy", False)
    ]
