"""torch.compile under the collector: graph breaks, recompiles and compile time from a real
``torch.compile`` call (``backend="eager"`` keeps it fast; dynamo does the same work)."""

from __future__ import annotations

import inspect
from pathlib import Path

import torch

import explorer
from explorer.collect.compile_events import parse_graph_break
from tests.collect.trace_reading import explorer_events, read_trace


def _breaking(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    print("inside the compiled function")  # a graph break: dynamo cannot trace print()
    return y.sin()


PRINT_LINE = inspect.getsourcelines(_breaking)[1] + 2


def test_graph_break_recompile_and_compile_time_are_recorded_with_lines(tmp_path: Path) -> None:
    import torch._dynamo

    torch._dynamo.reset()
    compiled = torch.compile(_breaking, backend="eager")
    inputs = [torch.randn(8), torch.randn(8), torch.randn(3, 3)]  # the 2-D input recompiles
    with explorer.collect(tmp_path, with_stack=False, sampler_interval_s=None) as c:
        outputs = [compiled(x) for x in inputs]
        c.step()
    for x, out in zip(inputs, outputs, strict=True):  # the hooks did not change results
        assert torch.equal(out, _breaking(x))

    doc = read_trace(c.trace_path)
    events = explorer_events(doc, "explorer_compile")
    breaks = [e for e in events if e["args"]["event"] == "graph_break"]
    assert breaks, "the print() graph break was not recorded"
    assert {(e["args"]["source_file"], e["args"]["source_line"]) for e in breaks} == {
        (__file__, PRINT_LINE)
    }
    assert all("print" in e["args"]["reason"] for e in breaks)
    assert breaks[0]["args"]["source_function"] == "_breaking"

    compiles = [e for e in events if e["args"]["event"] in ("compile", "recompile")]
    first = [e for e in compiles if e["args"]["frame"] == "_breaking"]
    assert [e["args"]["event"] for e in first] == ["compile", "recompile"]
    assert "rank mismatch" in first[1]["args"]["reason"]  # the guard that failed
    for e in compiles:
        assert e["dur"] > 0 and e["args"]["compile_time_ns"] == round(e["dur"] * 1000)
        assert e["args"]["source_file"] == __file__
    assert not any(
        "explorer" in e["args"]["frame"] or e["args"]["frame"] == "wrapper" for e in compiles
    )
    # the graph breaks happen while their frame compiles
    span = [(e["ts"], e["ts"] + e["dur"]) for e in first]
    assert any(lo <= breaks[0]["ts"] <= hi for lo, hi in span)

    trace = explorer.load(c.trace_path, use_cache=False)
    assert (trace.slices["kind"].astype(str) == "compile").sum() == len(events)


def test_compiled_code_sees_no_hook_and_keeps_a_full_graph(tmp_path: Path) -> None:
    """``fullgraph=True`` fails on any graph break, so a wrapper that leaked into the graph
    (``.to()``, ``.cpu()``, ``copy_``) would raise here."""
    import torch._dynamo

    torch._dynamo.reset()

    def f(x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        y.copy_(x)
        return y.to(torch.float64).cpu() * 2

    x = torch.randn(6)
    with explorer.collect(tmp_path, with_stack=False, sampler_interval_s=None) as c:
        out = torch.compile(f, fullgraph=True, backend="eager")(x)
        c.step()
    assert torch.equal(out, f(x))
    assert explorer_events(read_trace(c.trace_path), "explorer_copy") == []


def test_parse_graph_break_prefers_the_user_frame_over_explorer_wrappers() -> None:
    from explorer.collect.event_buffer import COLLECT_DIR

    message = (
        f"Graph break in user code at {COLLECT_DIR}runtime_hooks.py:105\n"
        "Graph Break Reason: Encountered graph break when attempting to trace CALL:\n\n"
        "Unsupported Tensor.item() call with capture_scalar_outputs=False\n"
        "  Explanation: Dynamo does not support tracing `Tensor.item()`.\n"
        "  Hint: Set `torch._dynamo.config.capture_scalar_outputs = True`\n\n"
        "User code traceback:\n"
        '  File "/home/me/train.py", line 40, in <module>\n'
        "    step(batch)\n"
        '  File "/home/me/train.py", line 12, in step\n'
        "    if loss.item() > 0:\n"
        f'  File "{COLLECT_DIR}runtime_hooks.py", line 105, in wrapper\n'
    )
    gb = parse_graph_break(message)
    assert (gb["file"], gb["line"], gb["function"]) == ("/home/me/train.py", 12, "step")
    assert gb["reason"].startswith("Unsupported Tensor.item() call")
    assert "Hint" not in gb["reason"]


def test_compiles_are_recorded_when_dynamo_is_first_imported_inside_the_block(
    tmp_path: Path,
) -> None:
    """A fresh interpreter: ``torch._dynamo`` is not loaded when the block starts, so the
    compile hooks install when the block calls ``torch.compile`` and see every compile and
    graph break; ``torch.compile`` is itself again after the block."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        f"""
        import sys, torch, explorer
        assert "torch._dynamo" not in sys.modules
        original = torch.compile
        def f(x):
            y = x * 2
            print("break")
            return y.sin()
        with explorer.collect({str(tmp_path)!r}, with_stack=False, sampler_interval_s=None) as c:
            g = torch.compile(f, backend="eager")
            g(torch.randn(4))
            c.step()
            g(torch.randn(2, 2))
            c.step()
        assert torch.compile is original
        print(c.trace_path)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = read_trace(Path(proc.stdout.strip().splitlines()[-1]))
    events = explorer_events(doc, "explorer_compile")
    frames = [
        (e["args"]["event"], e["args"]["frame"])
        for e in events
        if e["args"]["event"] != "graph_break"
    ]
    line = script.splitlines().index('    print("break")') + 1
    assert frames[:2] == [("compile", "f"), ("compile", f"torch_dynamo_resume_in_f_at_{line}")]
    assert ("recompile", "f") in frames
    breaks = [e for e in events if e["args"]["event"] == "graph_break"]
    assert breaks and {e["args"]["source_line"] for e in breaks} == {line}  # the print()
