"""The suite runs the way a user runs it: bare ``pytest`` as well as ``python -m pytest``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_bare_pytest_imports_the_test_helpers() -> None:
    """``pytest`` (the console script) does not put the working directory on sys.path;
    the tests import ``tests.*`` helpers, so the project config must."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    pytest = Path(sys.executable).with_name("pytest")
    run = subprocess.run(
        [str(pytest), "--collect-only", "-q", "tests/collect/test_sample_traces.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "test_sample_traces.py::" in run.stdout


#: ``python -c`` code: torch cannot be imported (as on a machine without it), then pytest
#: collects the folders named in argv.
WITHOUT_TORCH = """
import sys

import pytest

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoTorch())

sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
"""


@pytest.mark.slow
@pytest.mark.subprocess
def test_analysis_tests_collect_without_torch() -> None:
    """The analyses are pure functions of a trace: their tests need no torch (issue 27 item
    9); the ones that capture a run import it where they capture."""
    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH, "tests/analysis"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "error" not in run.stdout.splitlines()[-1]
    assert "test_breakdown.py::" in run.stdout
