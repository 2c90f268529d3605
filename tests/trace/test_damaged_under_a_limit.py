"""Under a real address-space limit (``ulimit -v 6G``, common on shared clusters) a small
damaged trace — a cut ``.gz``, a cut ``.json``, either on standard input — is recovered as
it is without a limit: the reader sizes its reads by what the input holds (it reserved its
whole budget, half the machine's free memory, up front, and every such file failed with
"does not fit in the memory"). "Out of memory" is said only when it is true."""

from __future__ import annotations

import gzip
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, SAMPLE_TRACES

TRACE = SAMPLE_TRACES / "cpu_slow_dataloader.pt.trace.json.gz"
LIMIT = 6 << 30


def _explorer(args: list[str], stdin: Path | None, limit: int) -> subprocess.CompletedProcess:
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    with open(stdin or os.devnull, "rb") as f:
        return subprocess.run(
            [sys.executable, "-m", "explorer", *args],
            stdin=f,
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            preexec_fn=cap,
            timeout=120,
        )


@pytest.fixture(scope="module")
def cut(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cut")
    text = gzip.decompress(TRACE.read_bytes())
    out = {"gz": d / "cut.json.gz", "json": d / "cut.json"}
    out["gz"].write_bytes(TRACE.read_bytes()[:4096])
    out["json"].write_bytes(text[: len(text) // 2])
    return out


@pytest.mark.parametrize("kind", ["gz", "json"])
@pytest.mark.parametrize("stdin", [False, True], ids=["file", "stdin"])
def test_a_small_cut_trace_is_recovered_under_an_address_space_limit(
    cut: dict[str, Path], kind: str, stdin: bool
) -> None:
    path = cut[kind]
    args = ["info", "--no-cache", "-" if stdin else str(path)]
    free = _explorer(args, path if stdin else None, resource.RLIM_INFINITY)
    capped = _explorer(args, path if stdin else None, LIMIT)
    assert free.returncode == 0, free.stderr[-2000:]
    assert capped.returncode == 0, capped.stderr[-2000:]
    assert "memory" not in capped.stderr
    assert "cut short" in capped.stderr + capped.stdout
    assert capped.stdout == free.stdout and capped.stderr == free.stderr


@pytest.fixture(scope="module")
def padded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The trace with 300 MB of padding in its metadata: a stretch with no event boundary."""
    big = tmp_path_factory.mktemp("padded") / "big.json"
    text = gzip.decompress(TRACE.read_bytes())
    with open(big, "wb") as f:
        f.write(text[:-1] + b', "pad": "')
        f.write(b"x" * (300 << 20))
        f.write(b'"}')
    return big


def test_a_long_stretch_without_an_event_boundary_is_read_in_linear_time(padded: Path) -> None:
    """The chunked reader searched for the next boundary from the same place for every
    64 KiB read: 300 MB without one took minutes. It loads in seconds."""
    done = _explorer(["info", "--no-cache", str(padded)], None, resource.RLIM_INFINITY)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "steps: 4" in done.stdout


def test_out_of_memory_is_said_when_it_is_true(padded: Path) -> None:
    """A trace too large for the limit still fails in one line that says so."""
    done = _explorer(["info", "--no-cache", str(padded)], None, 1 << 30)
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert "does not fit in the memory" in done.stderr and "1.0 GiB" in done.stderr
