"""Issue 30's check against reality: a real CPU training run under the collector whose
steps alternate between the demo's planted slow loading and none (same model, same data,
same machine load), and the replay's prediction for the slow steps with the input stall
removed against the measured time of the steps without it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.conftest import ROOT


def _validation():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location(
        "whatif_validation", ROOT / "benchmarks" / "whatif_validation.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_removing_the_planted_slow_loading_predicts_the_step_time_without_it(
    tmp_path: Path,
) -> None:
    v = _validation()
    trace = v.record(tmp_path / "input", "input", 10, True)
    got = v.compare(trace, "input")
    # the loading is about half of a planted step: a prediction that ignored it, or
    # removed it twice, would be ~2x off
    assert got["planted_ms"] > 1.4 * got["measured_ms"], got
    assert got["error"] <= v.TOLERANCE, got
