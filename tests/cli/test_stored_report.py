"""A repeat ``explorer report`` of an unchanged trace file reads the document the first one
stored, before loading the trace or importing the analyses (pandas among them): the same
bytes in every format, the same ``--fail-on`` verdict, in Python's start-up time. A changed
trace file or a damaged stored document is analysed again. Real processes, as a user runs
them, each with the cache directory of the test."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_TRACES

SAMPLE = SAMPLE_TRACES / "cpu_slow_dataloader.pt.trace.json.gz"
OTHER = SAMPLE_TRACES / "cpu_cnn.pt.trace.json.gz"
#: Modules a report read back from the store must not import: the model's tables and the
#: analyses (each takes a fraction of a second to import, the analyses seconds to run).
HEAVY = ("pandas", "pyarrow", "explorer.analysis.critical_path", "explorer.trace.model")


def _report(cache: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """``explorer report ARGS`` in a fresh process with ``cache``, and the modules it
    imported (``-X importtime``)."""
    env = {**os.environ, "EXPLORER_CACHE_DIR": str(cache), "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "explorer", "report", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    proc.stderr = "\n".join(
        line for line in proc.stderr.splitlines() if not line.startswith("import time:")
    )
    return proc, imported


@pytest.fixture()
def trace(tmp_path: Path) -> Path:
    out = tmp_path / "traces" / SAMPLE.name
    out.parent.mkdir()
    shutil.copy(SAMPLE, out)
    return out


def test_a_repeat_report_is_read_back_in_every_format(trace: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for fmt in ("json", "text", "markdown", "html"):
        first, first_imported = _report(cache, str(trace), "--format", fmt)
        again, imported = _report(cache, str(trace), "--format", fmt)
        assert first.returncode == again.returncode == 0, first.stderr + again.stderr
        # the first report analysed the trace; the document serves every format after it
        assert ("pandas" in first_imported) == (fmt == "json")
        assert again.stdout == first.stdout, fmt
        assert not imported & set(HEAVY), f"{fmt}: imported {sorted(imported & set(HEAVY))}"
    # The stored document is the one a fresh analysis gives (no cache at all).
    fresh, _ = _report(cache, str(trace), "--format", "json", "--no-cache")
    again, _ = _report(cache, str(trace), "--format", "json")
    assert json.loads(again.stdout) == json.loads(fresh.stdout)
    assert json.loads(again.stdout)["findings"], "the sample has findings to compare"
    # Other options are another document: computed, then read back in turn.
    top1, imported = _report(cache, str(trace), "--format", "json", "--top", "1")
    assert "pandas" in imported and len(json.loads(top1.stdout)["findings"]) == 1
    step1, imported = _report(cache, str(trace), "--format", "json", "--step", "1")
    assert "pandas" in imported and [s["step"] for s in json.loads(step1.stdout)["steps"]] == [1]
    step1_again, imported = _report(cache, str(trace), "--format", "json", "--step", "1")
    assert step1_again.stdout == step1.stdout and not imported & set(HEAVY)


def test_fail_on_and_output_files_from_the_stored_document(trace: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    rule = ["--fail-on", "input_stall>5%", "--fail-on", "sync_stall>50%"]
    first, _ = _report(cache, str(trace), *rule)
    again, imported = _report(cache, str(trace), *rule)
    assert first.returncode == again.returncode == 1
    assert "FAIL --fail-on input_stall>5%" in again.stderr and "sync_stall" not in again.stderr
    assert again.stderr == first.stderr
    out = tmp_path / "report.md"
    written, imported = _report(cache, str(trace), "--format", "markdown", "-o", str(out))
    assert written.returncode == 0 and out.read_text().startswith("# Explorer report")
    assert not imported & set(HEAVY)
    refused, _ = _report(cache, str(trace), "--format", "markdown", "-o", str(out))
    assert refused.returncode == 2 and "--force" in refused.stderr  # nothing overwritten
    onto_trace, _ = _report(cache, str(trace), "-o", str(trace), "--force")
    assert onto_trace.returncode == 2 and trace.read_bytes() == SAMPLE.read_bytes()


def test_a_changed_trace_or_a_damaged_document_is_analysed_again(
    trace: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    first, _ = _report(cache, str(trace), "--format", "json")
    assert first.returncode == 0
    shutil.copy(OTHER, trace)  # the same path, another run's trace
    changed, imported = _report(cache, str(trace), "--format", "json")
    assert "pandas" in imported
    fresh, _ = _report(cache, str(trace), "--format", "json", "--no-cache")
    assert json.loads(changed.stdout) == json.loads(fresh.stdout) != json.loads(first.stdout)
    # One flipped byte in every stored tree (the document's among them): computed again,
    # the same answer.
    trees = sorted(cache.glob("*/results/*/tree.json"))
    assert trees
    for tree in trees:
        data = bytearray(tree.read_bytes())
        data[len(data) // 2] ^= 0x01
        tree.write_bytes(bytes(data))
    damaged, imported = _report(cache, str(trace), "--format", "json")
    assert damaged.returncode == 0 and "pandas" in imported
    assert damaged.stdout == changed.stdout
