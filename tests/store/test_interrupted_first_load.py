"""Ctrl-C during a first load ends the CLI with one line and status 130 and leaves no
half-written store entry: while parsing (in decoding worker processes, which end too), no entry; while the cache entry is being written,
the interrupt waits for it to be installed whole. No writer's temporary is left, and the
next load works."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import explorer
from explorer.scenarios.large import write_large
from explorer.store import open_trace
from tests.conftest import ctrl_c_reaches

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # real traces here load in well under a second: too quick to interrupt reliably
    return write_large(tmp_path_factory.mktemp("big") / "big.json.gz", 500_000)


@pytest.fixture(scope="module")
def n_slices(big_trace: Path) -> int:
    return len(explorer.load(big_trace, use_cache=False).slices)


def _start_info(trace: Path, cache: Path, workers: int = 0) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EXPLORER_CACHE_DIR": str(cache)}
    if workers:
        env["EXPLORER_LOAD_WORKERS"] = str(workers)
    return subprocess.Popen(
        [sys.executable, "-m", "explorer", "info", str(trace)],
        cwd=ROOT,
        preexec_fn=ctrl_c_reaches,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _interrupted(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err.decode()


def _decoding(proc: subprocess.Popen[bytes]) -> list[psutil.Process]:
    """The loader's decoding workers, once they have started (the load still running)."""
    loader = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    while not loader.children() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    workers = loader.children()
    assert workers and proc.poll() is None, "the load finished before it could be stopped"
    return workers


def _gone(workers: list[psutil.Process], within: float = 10.0) -> bool:
    _, alive = psutil.wait_procs(workers, timeout=within)
    return not alive


def _assert_cache_whole(cache: Path, expected: int) -> None:
    """Nothing half-written is left: no writer's temporary, and every entry opens intact
    with all ``expected`` slices."""
    left = sorted(p.name for p in cache.iterdir()) if cache.exists() else []
    assert not [n for n in left if n.startswith(".")], left
    for name in left:
        assert len(open_trace(cache / name).slices) == expected


def test_ctrl_c_while_parsing_leaves_no_entry(
    big_trace: Path, n_slices: int, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    proc = _start_info(big_trace, cache, workers=2)
    # interrupted while its worker processes decode (not while Python imports modules)
    workers = _decoding(proc)
    rc, err = _interrupted(proc)
    assert rc == 130, err
    assert err.strip().splitlines() == ["explorer: interrupted"], err
    assert not cache.exists() or not any(cache.iterdir())
    _assert_cache_whole(cache, n_slices)
    assert _gone(workers), "decoding workers outlived the interrupted load"


_CTRL_C_AT_SHUTDOWN = r"""
import os, signal, sys, threading
from concurrent.futures import ProcessPoolExecutor
import explorer

shutdown = ProcessPoolExecutor.shutdown

def interrupted_shutdown(self, *args, **kwargs):
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C just as the decoding pool shuts down
    return shutdown(self, *args, **kwargs)

ProcessPoolExecutor.shutdown = interrupted_shutdown
try:
    explorer.load(sys.argv[1], use_cache=False)
    print("loaded")
except KeyboardInterrupt:
    managers = [t for t in threading.enumerate() if "ExecutorManager" in type(t).__name__]
    print("interrupted; manager threads alive:", sum(t.is_alive() for t in managers))
"""


def test_ctrl_c_as_the_decoding_pool_shuts_down_waits_for_it(big_trace: Path) -> None:
    """A Ctrl-C while the decoding workers are being shut down is raised once they are:
    cut half-way, the pool's manager thread outlived the load and raced Python's exit hook
    (a "Bad file descriptor" traceback after "explorer: interrupted", now and then)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EXPLORER_LOAD_WORKERS": "2"}
    out = subprocess.run(
        [sys.executable, "-c", _CTRL_C_AT_SHUTDOWN, str(big_trace)],
        cwd=ROOT,
        preexec_fn=ctrl_c_reaches,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.stdout.strip() == "interrupted; manager threads alive: 0", out.stderr
    assert "Traceback" not in out.stderr, out.stderr


@pytest.mark.parametrize("attempt", range(4))  # the window is short: hit it several times
def test_ctrl_c_while_the_entry_is_written_waits_until_it_is_whole(
    big_trace: Path, n_slices: int, tmp_path: Path, attempt: int
) -> None:
    cache = tmp_path / "cache"
    proc = _start_info(big_trace, cache)
    writing = False
    while proc.poll() is None and not writing:  # wait for the writer's temporary directory
        writing = cache.exists() and any(p.name.endswith(".writing") for p in cache.iterdir())
        time.sleep(0.001)
    assert writing, "the entry was written before it was seen"
    rc, err = _interrupted(proc)
    assert rc in (0, 130), err  # 0: the signal came after loading was done
    assert "Traceback" not in err
    # the interrupt is held back until the entry is installed: it is there, whole
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 1
    _assert_cache_whole(cache, n_slices)
    # and the next load works, from the entry when there is one
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EXPLORER_CACHE_DIR": str(cache)}
    again = subprocess.run(
        [sys.executable, "-m", "explorer", "info", str(big_trace)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr.decode()
    _assert_cache_whole(cache, n_slices)


def test_sigterm_while_parsing_stops_the_workers_and_leaves_nothing(
    big_trace: Path, n_slices: int, tmp_path: Path
) -> None:
    """SIGTERM (``timeout``, ``kill``, a batch scheduler) mid-decode ends the load as it
    asks, after the workers are stopped and the spilled columns removed: before, the
    process ended where the signal landed, its workers waited for chunks forever and its
    spill directory stayed for an hour."""
    # A SIGTERM landing while the workers were forked used to be lost (its handler ran in
    # logging's at-fork callback, where Python drops exceptions: exit 0, 1 run in 3 on a
    # loaded machine): the workers are forked with both signals held back, so it is not.
    cache = tmp_path / "cache"
    proc = _start_info(big_trace, cache, workers=2)
    workers = _decoding(proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert "Exception ignored" not in err.decode(), err.decode()
    assert proc.returncode == -signal.SIGTERM
    assert _gone(workers)
    assert not cache.exists() or not any(cache.iterdir())
    assert len(explorer.load(big_trace, store=cache).slices) == n_slices  # the next load works
    _assert_cache_whole(cache, n_slices)


def test_a_loader_killed_outright_takes_its_workers_with_it(
    big_trace: Path, n_slices: int, tmp_path: Path
) -> None:
    """SIGKILL (the OOM killer's) gives the loader no chance to stop its workers: the
    kernel does (``PR_SET_PDEATHSIG``). The spill directory it left is removed by the next
    load at once, its process being gone, not an hour later."""
    cache = tmp_path / "cache"
    proc = _start_info(big_trace, cache, workers=2)
    workers = _decoding(proc)
    proc.kill()
    proc.communicate(timeout=120)
    assert _gone(workers)
    left = [p for p in cache.iterdir() if p.name.startswith(".explorer-spill-")]
    assert len(left) == 1, left  # this load's columns spilled beside the cache, left by the kill
    assert len(explorer.load(big_trace, store=cache).slices) == n_slices
    assert not left[0].exists()
    _assert_cache_whole(cache, n_slices)
