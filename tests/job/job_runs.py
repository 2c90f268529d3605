"""Real multi-rank jobs for the job report's tests (imported by name: ``job_runs``, not
``conftest``, which several test packages have).

``run_ddp_job`` runs ``scripts/make_job_traces.py`` for real: 4 processes in one gloo
process group on this machine, each under ``explorer.collect()``. Each run takes tens of
seconds on a busy 2-core machine, so the runs are module-scoped and few.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "make_job_traces.py"
SAMPLE_JOB = ROOT / "sample_traces" / "ddp_4rank_slow_input"


def run_ddp_job(out: Path, *args: str) -> dict:
    """Run the DDP capture script into ``out``; returns the job's recorded settings."""
    r = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), "--steps", "4", "--delay-ms", "40", *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((out / "job.info").read_text())


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``explorer ...`` in a fresh process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "explorer", *args], capture_output=True, text=True, timeout=300
    )
