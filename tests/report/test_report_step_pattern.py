"""Steps from the user's own annotation: ``trace.use_steps(regex)`` and
``explorer report --steps REGEX``, on a real collector trace (sample_traces/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import explorer
from explorer.cli.main import main

CNN = Path(__file__).resolve().parents[2] / "sample_traces" / "cpu_cnn.pt.trace.json.gz"


def test_use_steps_reaches_every_analysis() -> None:
    t = explorer.load(CNN)
    profiler_steps = t.steps()
    forward = t.slices[(t.slices["name"] == "forward") & (t.slices["kind"] == "annotation")]
    t.use_steps("^forward$")
    st = t.steps()
    assert len(st) == len(forward) and set(st["name"]) == {"forward"}
    assert set(profiler_steps["name"]) != {"forward"}
    assert sorted(st["dur_ns"]) == sorted(forward["dur"])
    # The breakdown is per these steps and still partitions each one exactly.
    b = t.breakdown()
    per_step = b.groupby("step")["ns"].sum()
    assert per_step.to_dict() == dict(zip(st["step"], st["dur_ns"], strict=True))
    t.use_steps(None)
    assert t.steps()["name"].tolist() == profiler_steps["name"].tolist()


def test_report_steps_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(CNN), "--steps", "^forward$", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["steps"] and all(s["name"] == "forward" for s in doc["steps"])


@pytest.mark.parametrize(
    ("pattern", "message"),
    [("(", "not a valid regular expression"), ("no_such_annotation", "matches")],
)
def test_report_steps_option_errors(
    pattern: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(CNN), "--steps", pattern]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
