"""The CLI's loading progress line: drawn on stderr only when it is a terminal and only for
a load over a second, with the bytes/s and an estimate of the time left."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from explorer.cli.progress import progress_line
from explorer.scenarios.large import write_large
from tests.conftest import ROOT

#: The real traces here load in well under a second (the largest, 0.75 MB gzip, in about
#: 0.35 s), so the over-a-second load is the large-trace writer's repeated real scenario step:
#: 1.5M events load in ~2.8 s on a quiet 2-core machine (500k, what this took before, came
#: to load in under a second as the loader got faster, and the line was rightly not drawn).
N_EVENTS = 1_500_000


@pytest.fixture(scope="module")
def slow_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_large(tmp_path_factory.mktemp("big") / "big.json.gz", N_EVENTS)


def _run_info(trace: Path, *, tty: bool) -> tuple[int, str]:
    """``explorer info --no-cache TRACE`` with stderr on a pseudo-terminal (or a pipe);
    returns the exit status and everything written to stderr."""
    cmd = [sys.executable, "-m", "explorer", "info", "--no-cache", str(trace)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if not tty:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, timeout=300)
        return proc.returncode, proc.stderr.decode()
    master, slave = pty.openpty()
    try:
        p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=slave)
    finally:
        os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return p.wait(timeout=300), b"".join(chunks).decode()


def test_a_slow_load_draws_rate_and_estimate_on_a_terminal(slow_trace: Path) -> None:
    rc, err = _run_info(slow_trace, tty=True)
    assert rc == 0, err
    lines = [x for x in err.split("\r") if x.startswith("explorer: [")]
    assert lines, err
    rates = [float(m.group(1)) for x in lines if (m := re.search(r"([\d.]+) MB/s", x))]
    assert rates and all(r > 0 for r in rates), lines
    # the file is ~32 MB read in a few seconds: a rate above the file size per 0.1 s is wrong
    size_mb = slow_trace.stat().st_size / 1e6
    assert max(rates) < size_mb / 0.1
    assert any(re.search(r"about \d+ s left", x) for x in lines), lines
    assert err.endswith("\r")  # the line is blanked once loaded, not left on screen


def test_no_progress_line_off_a_terminal(slow_trace: Path) -> None:
    rc, err = _run_info(slow_trace, tty=False)
    assert rc == 0, err
    assert "MB/s" not in err and "[#" not in err and "\r" not in err


def test_a_quick_load_draws_nothing_on_a_terminal(sample_traces: Path) -> None:
    rc, err = _run_info(sample_traces / "cpu_cnn.pt.trace.json.gz", tty=True)
    assert rc == 0, err
    assert "MB/s" not in err


def test_rate_and_estimate_arithmetic() -> None:
    # 10 MB file, half done after 2 s: 2.5 MB/s, 2 s left
    line = progress_line(0.5, "decoding events", 2.0, 10_000_000)
    assert "2.5 MB/s" in line and "about 2 s left" in line and " 50%" in line
    assert line.endswith("decoding events")
    # a quarter done after 3 s: 9 s left; size unknown (stdin): no rate
    line = progress_line(0.25, "reading", 3.0, 0)
    assert "MB/s" not in line and "about 9 s left" in line
