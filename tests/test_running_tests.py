"""The suite runs the way a user runs it: bare ``pytest`` as well as ``python -m pytest``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
