"""The line of a cause is the statement where its time goes: on a real profiled training
loop (``cause_lines_workload.py``), the input stall at the dataset's slow read with the
``for`` loop as context, compute at the matmul loop (not ``def forward``), the checkpoint
at its ``torch.save`` — and never the ``with explorer.collect(...)`` line, which is what
torch's Python tracer names the loop's frame by."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import explorer
from explorer.analysis.cause_lines import category_lines, statement_line, statement_ns

WORKLOAD = Path(__file__).with_name("cause_lines_workload.py")
LINES = WORKLOAD.read_text().splitlines()


def _line(text: str) -> int:
    (n,) = [i for i, t in enumerate(LINES, 1) if text in t]
    return n


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> explorer.Trace:
    pytest.importorskip("torch")  # the workload trains under torch; tests/analysis needs none
    out = tmp_path_factory.mktemp("causes")
    r = subprocess.run(
        [sys.executable, str(WORKLOAD), str(out)], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (path,) = out.glob("*.pt.trace.json.gz")
    return explorer.load(path)


def test_the_input_stall_is_at_the_slow_read_with_the_loop_as_context(
    trace: explorer.Trace,
) -> None:
    (stall,) = [f for f in trace.findings() if f.kind == "input_stall"]
    lines = [(Path(f).name, n) for f, n, _ in stall.source_lines]
    assert lines[0] == (WORKLOAD.name, _line("# the slow read")), lines
    assert (WORKLOAD.name, _line("for x in loader:")) in lines, lines
    assert (WORKLOAD.name, _line("with explorer.collect(")) not in lines, lines


def test_each_category_has_its_own_statement(trace: explorer.Trace) -> None:
    lines = category_lines(trace)
    top = {
        cat: int(g.sort_values("ns", ascending=False)["line"].iloc[0])
        for cat, g in lines.groupby("category")
    }
    assert top["compute"] == _line("# the hot loop"), top
    assert top["host_io"] == _line("# the checkpoint"), top
    assert _line("with explorer.collect(") not in top.values(), top
    # the statements' time is each instant once: the categories classify part of what the
    # statements hold, which is at most the host threads' time in the trace
    assert (lines["ns"] > 0).all()
    held = int(statement_ns(trace)["ns"].sum())
    assert int(lines["ns"].sum()) <= held
    s = trace.slices
    span = int((s["ts"] + s["dur"]).max() - s["ts"].min())
    assert held <= span * len(trace.host_tracks())


def test_without_the_source_the_frame_line_is_kept(tmp_path: Path) -> None:
    # a trace analysed where its script is not: the recorded line stays as it was
    assert statement_line(str(tmp_path / "gone" / "train.py"), 42, [("sleep", 1.0)]) == 42
    # with it, a def line moves to the statement that calls what ran under the frame
    assert statement_line(str(WORKLOAD), _line("def __getitem__"), [("sleep", 1.0)]) == _line(
        "# the slow read"
    )
