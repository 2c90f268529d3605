"""The collector never loses a capture: real training processes interrupted (SIGINT),
killed (SIGKILL) while they write their trace, or whose output directory stops accepting
files mid-run (``tests/collect/capture_child.py`` is the training process)."""

from __future__ import annotations

import array
import fcntl
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import explorer
from tests.conftest import ROOT, SAMPLE_TRACES, ctrl_c_reaches

STEPS = "6"


def _start(out_dir: Path) -> subprocess.Popen[str]:
    """The training child, paused inside its ``collect`` block once its steps are done."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.collect.capture_child", str(out_dir), STEPS, "--pause"],
        cwd=ROOT,
        preexec_fn=ctrl_c_reaches,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == "paused":
            return proc
    raise AssertionError(f"the child never paused: {proc.stderr.read() if proc.stderr else ''}")


def _leave_block_and_wait_for_writing(proc: subprocess.Popen[str], out_dir: Path) -> list[str]:
    """Let the child leave its block, and return as soon as it has a hidden file (a cycle
    export or the trace's temporary file) in ``out_dir``: it is writing its trace."""
    assert proc.stdin is not None
    proc.stdin.write("\n")
    proc.stdin.flush()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        hidden = [p.name for p in out_dir.iterdir() if p.name.startswith(".")]
        if hidden:
            return hidden
        assert proc.poll() is None, "the child finished before it was seen writing"
        time.sleep(0.0005)
    raise AssertionError("the child never started writing")


def test_ctrl_c_while_writing_keeps_the_trace(tmp_path: Path) -> None:
    proc = _start(tmp_path)
    _leave_block_and_wait_for_writing(proc, tmp_path)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    # The Ctrl-C is honoured once the trace is written: KeyboardInterrupt, not silence.
    assert proc.returncode != 0 and "KeyboardInterrupt" in err, (out, err)
    assert "Ctrl-C will take effect when it is written" in err
    written = list(tmp_path.glob("*.pt.trace.json.gz"))
    assert len(written) == 1, sorted(p.name for p in tmp_path.iterdir())
    trace = explorer.load(written[0], use_cache=False)
    assert len(trace.steps()) == int(STEPS)  # every recorded step is there
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_sigkill_while_writing_leaves_nothing_that_is_loaded(tmp_path: Path) -> None:
    proc = _start(tmp_path)
    hidden = _leave_block_and_wait_for_writing(proc, tmp_path)
    proc.kill()
    proc.communicate(timeout=60)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left and all(n.startswith(".") for n in left), left  # only hidden leftovers
    assert hidden
    # Nothing a directory load would take: 'explorer info DIR' says there is no trace ...
    info = _explorer("info", str(tmp_path))
    assert info.returncode == 2 and "no trace files" in info.stderr
    assert "Traceback" not in info.stderr and len(info.stderr.strip().splitlines()) == 1
    # ... and once a good trace is beside the leftovers, that is the one it shows.
    good = tmp_path / "good_rank0.pt.trace.json.gz"
    shutil.copyfile(SAMPLE_TRACES / "cpu_cnn.pt.trace.json.gz", good)
    info = _explorer("info", str(tmp_path), "--json")
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["path"] == str(good)
    assert "holds" not in info.stderr  # not "DIR holds 2 traces"


@contextmanager
def _unwritable(directory: Path) -> Iterator[str]:
    """``directory`` made to refuse new files; yields the reason the OS will give. Root
    ignores permission bits, so as root the directory is made immutable instead."""
    if os.geteuid() != 0:
        directory.chmod(0o555)
        try:
            yield os.strerror(13)  # EACCES
        finally:
            directory.chmod(0o755)
        return
    fs_ioc_getflags, fs_ioc_setflags, immutable = 0x80086601, 0x40086602, 0x10
    fd = os.open(directory, os.O_RDONLY)
    try:
        flags = array.array("l", [0])
        fcntl.ioctl(fd, fs_ioc_getflags, flags, True)
        fcntl.ioctl(fd, fs_ioc_setflags, array.array("l", [flags[0] | immutable]))
        try:
            yield os.strerror(1)  # EPERM
        finally:
            fcntl.ioctl(fd, fs_ioc_setflags, flags)
    finally:
        os.close(fd)


def test_output_directory_made_unwritable_mid_run_names_the_cause(tmp_path: Path) -> None:
    out_dir = tmp_path / "runs"
    out_dir.mkdir()
    proc = _start(out_dir)
    with _unwritable(out_dir) as reason:
        out, err = proc.communicate("\n", timeout=300)
    assert proc.returncode == 3, (out, err)
    message = [ln for ln in out.splitlines() if ln.startswith("error:")]
    assert len(message) == 1 and reason in message[0] and str(out_dir) in message[0], out
    assert "FileNotFoundError" not in out + err and "Traceback" not in err


def _explorer(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "explorer", *argv],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_trace_files_are_gzip_json_after_a_clean_run(tmp_path: Path) -> None:
    """The control: the same child, undisturbed, writes one complete trace and no leftovers."""
    proc = _start(tmp_path)
    out, err = proc.communicate("\n", timeout=300)
    assert proc.returncode == 0, err
    (written,) = tmp_path.iterdir()
    assert out.strip().endswith(f"wrote {written}")
    doc = json.loads(gzip.decompress(written.read_bytes()))
    assert doc["explorer"]["steps"] == int(STEPS)
