"""One step time for every verb, partial steps left out of it, the level of nested step
annotations said, and ``--step N`` findings that are step N's (issue 23, points 2 and 5),
through the command line on real traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from explorer.cli.main import main
from explorer.units import fmt_ns

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
AMD = "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main([*argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_partial_last_step_is_marked_and_left_out(
    shared_traces: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real MI250 trace's 49 µs ProfilerStep#2 halved its mean step (4.67 ms for a
    9.29 ms step): it is marked partial in the JSON and the text, and the mean, the summary
    and --fail-on read step 1 alone."""
    path = str(shared_traces / AMD)
    doc = _json(capsys, "report", path)
    s = doc["summary"]
    by_step = {x["step"]: x for x in doc["steps"]}
    assert by_step[2]["partial"] and "profiler stopped" in by_step[2]["partial_reason"]
    assert not by_step[1]["partial"]
    assert s["steps"] == 1 and s["mean_step_ns"] == by_step[1]["dur_ns"]
    assert [(p["step"], p["left_out"]) for p in s["partial_steps"]] == [(2, True)]
    assert s["total_ns"] == by_step[1]["dur_ns"]
    for dev, cats in s["breakdown"].items():
        assert cats == by_step[1]["breakdown"][dev]
    assert main(["report", path]) == 0
    text = capsys.readouterr().out
    assert "Step 2 is partial" in text and "2 (partial)" in text
    assert f"1 step(s), mean {fmt_ns(by_step[1]['dur_ns'])}" in text
    # a CI rule on the step time sees the whole step (the fragment put the mean at 4.67 ms)
    assert main(["report", path, "--fail-on", "step_time<5ms"]) == 0
    capsys.readouterr()
    # asked for the fragment itself, the report gives its own figures and says what it is
    one = _json(capsys, "report", path, "--step", "2")
    assert one["summary"]["mean_step_ns"] == by_step[2]["dur_ns"]
    assert one["summary"]["partial_steps"][0]["left_out"] is False


def test_the_report_says_which_nested_annotation_defined_the_steps(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """On a real CPU collector trace, a pattern that matches ProfilerStep#N and the
    ``forward`` inside each: --step-nesting picks the level, and the report says which."""
    path = str(SAMPLES / "cpu_cnn.pt.trace.json.gz")
    pattern = r"^(ProfilerStep#\d+|forward)$"
    outer = _json(capsys, "report", path, "--steps", pattern)
    inner = _json(capsys, "report", path, "--steps", pattern, "--step-nesting", "innermost")
    assert {s["name"] for s in inner["steps"]} == {"forward"}
    assert all(s["name"].startswith("ProfilerStep#") for s in outer["steps"])
    assert len(inner["steps"]) == len(outer["steps"])  # one forward in each step
    assert outer["summary"]["step_origin"] == {
        "annotation": pattern, "nesting": "outermost", "nested_left_out": len(inner["steps"])
    }  # fmt: skip
    assert inner["summary"]["step_origin"]["nesting"] == "innermost"
    assert main(["report", path, "--steps", pattern]) == 0
    text = capsys.readouterr().out
    assert f"the outermost where they nest ({len(inner['steps'])} nested" in text
    assert "--step-nesting innermost takes those" in text


def test_diff_and_report_give_the_same_step_time(
    shared_traces: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shared trace_compare pair: diff said "median step time unchanged" (111 ms, from
    the host ranges) while the reports said 137 vs 111 ms. Both now read one step time."""
    a = str(shared_traces / "trace_compare__base__base.json.gz")
    b = str(shared_traces / "trace_compare__test__test.json.gz")
    ra, rb = _json(capsys, "report", a), _json(capsys, "report", b)
    d = _json(capsys, "diff", a, b)
    sides = {r["side"]: r for r in d["steps"]}
    assert sides["a"]["median_ns"] == ra["summary"]["median_step_ns"]
    assert sides["b"]["median_ns"] == rb["summary"]["median_step_ns"]
    assert d["step_delta_ns"] == rb["summary"]["median_step_ns"] - ra["summary"]["median_step_ns"]
    assert d["step_delta_ns"] != 0 and "unchanged" not in " ".join(d["notes"])
    # and the median is the report's own steps' (the same windows as its per-step table)
    durs = sorted(s["dur_ns"] for s in ra["steps"] if not s["partial"])
    assert ra["summary"]["median_step_ns"] == round((durs[0] + durs[-1]) / 2)


def test_step_n_findings_are_that_steps(capsys: pytest.CaptureFixture[str]) -> None:
    """The real slow-DataLoader run: with --step N the input-stall finding said 'waits 36.3
    ms per step … 145 ms in 4 step(s)' (the whole trace's). Now its time lost is the one the
    whole-trace finding gives step N, and its title and explanation carry that figure."""
    path = str(SAMPLES / "cpu_slow_dataloader.pt.trace.json.gz")
    whole = _json(capsys, "report", path)
    (stall,) = [f for f in whole["findings"] if f["kind"] == "input_stall"]
    assert len(stall["steps"]) > 1
    for n in stall["steps"]:
        doc = _json(capsys, "report", path, "--step", str(n))
        (f,) = [f for f in doc["findings"] if f["kind"] == "input_stall"]
        want = int(stall["details"]["per_step_ns"][str(n)])
        assert f["steps"] == [n]
        assert f["time_lost_ns"] == pytest.approx(want, rel=0.01)
        shown = fmt_ns(f["time_lost_ns"])
        assert shown in f["title"] and shown in f["explanation"]
        assert "in 1 step(s)" in f["explanation"]
        assert fmt_ns(stall["time_lost_ns"]) not in f["explanation"]
        # evidence names the whole trace's slices, inside step n
        st = next(s for s in doc["steps"] if s["step"] == n)
        assert f["evidence"] and all(isinstance(i, int) for i in f["evidence"])
        assert all(a < st["start_ns"] + st["dur_ns"] and b > st["start_ns"] for a, b in f["ranges"])
