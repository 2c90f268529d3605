"""The reader registry (explorer.readers): one reader per input kind, picked in one place,
each giving the trace the path stands for — a trace file, a TensorBoard log dir, a rank
dir, an Explorer store entry, an Execution Trace (named alone: an error that says what to
load), standard input."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import explorer
from explorer.errors import TraceError
from explorer.readers import READERS, input_files, read, sniff
from explorer.store import write_trace
from tests.store.test_store_roundtrip import assert_same_model

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"
CNN = SAMPLES / "cpu_cnn.pt.trace.json.gz"


def test_every_kind_is_sniffed_and_read_as_the_trace_it_holds(tmp_path: Path) -> None:
    whole = read(CNN, use_cache=False)
    run = tmp_path / "logdir" / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    shutil.copy(CNN, run / CNN.name)
    entry = write_trace(whole, tmp_path / "entry")
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    shutil.copy(CNN, ranks / "rank1.json.gz")
    shutil.copy(SAMPLES / "cpu_slow_dataloader.pt.trace.json.gz", ranks / "rank0.json.gz")
    cases = {
        CNN: "json",
        tmp_path / "logdir": "tensorboard",
        ranks: "rank_dir",
        entry: "store",
    }
    for path, kind in cases.items():
        assert sniff(path).kind == kind, path
    newest = read(tmp_path / "logdir", use_cache=False)
    assert newest.path == str(run / CNN.name)  # the newest run's trace
    newest.metadata["source"] = whole.path
    assert_same_model(newest, whole)
    from_store = read(entry)
    assert_same_model(from_store, whole)
    assert input_files(entry) == [entry]  # the entry's header is no trace of its own
    lowest = read(ranks, use_cache=False)
    assert Path(lowest.path).name == "rank0.json.gz"
    assert any("holds 2 traces" in w for w in lowest.metadata["warnings"])
    assert [k for k, r in enumerate(READERS) if r.kind == "json"] == [len(READERS) - 1]


def test_an_execution_trace_named_alone_says_what_to_load(shared_traces: Path) -> None:
    et = shared_traces / "execution_trace__benchmark_simple_add_et.json.gz"
    assert sniff(et).kind == "execution_trace"
    with pytest.raises(TraceError, match="Execution Trace, not a timeline trace"):
        read(et)


def test_standard_input_is_read_once_and_never_cached(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EXPLORER_CACHE_DIR": str(tmp_path / "c")}
    with open(CNN, "rb") as f:
        out = subprocess.run(
            [sys.executable, "-m", "explorer", "info", "-"],
            stdin=f,
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
    assert out.returncode == 0, out.stderr
    assert str(len(explorer.load(CNN, use_cache=False).slices)) in out.stdout.replace(",", "")
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").iterdir())
