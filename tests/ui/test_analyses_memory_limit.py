"""Under a memory limit the panels' analyses certainly cannot fit in, the window's
analysis runner runs none of them and each says why in one line (the timeline stays
usable); without a limit every one of them runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from explorer.scenarios.large import write_large
from explorer.ui.loader import ANALYSES
from tests.conftest import ROOT

_RUN = r"""
import json, resource, sys
import explorer
from explorer.trace.memory_limits import held_bytes
from explorer.ui.loader import run_analyses_now
t = explorer.load(sys.argv[1])
room = int(sys.argv[2])
if room:
    resource.setrlimit(resource.RLIMIT_DATA, (held_bytes() + room, resource.RLIM_INFINITY))
results, errors = run_analyses_now(t)
print(json.dumps({"results": sorted(results), "errors": errors}))
"""


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    d = tmp_path_factory.mktemp("panels")
    trace = write_large(d / "big.json", 400_000)  # 215,811 slices
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "EXPLORER_CACHE_DIR": str(d / "cache"),
        "QT_QPA_PLATFORM": "offscreen",
    }
    return trace, env


def _analyses(big: tuple[Path, dict[str, str]], room: int) -> dict:
    trace, env = big
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, str(trace), str(room)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_panels_analyses_are_refused_under_a_limit_they_cannot_fit(
    big: tuple[Path, dict[str, str]],
) -> None:
    out = _analyses(big, 60 << 20)  # 215,811 slices need at least 144 MiB
    assert out["results"] == []
    assert sorted(out["errors"]) == sorted(name for name, _ in ANALYSES)
    for message in out["errors"].values():
        assert "215,811 slices need at least" in message
        assert message.endswith("the panels stay empty") and "\n" not in message


def test_panels_analyses_all_run_without_a_limit(big: tuple[Path, dict[str, str]]) -> None:
    out = _analyses(big, 0)
    assert out["errors"] == {}
    assert out["results"] == sorted(name for name, _ in ANALYSES)
