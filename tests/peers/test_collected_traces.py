"""Traces written by ``explorer.collect`` load in the peers, ranks and all.

A real 2-rank ``torch.distributed`` job (gloo, on this machine; ``scripts/make_job_traces.py``)
runs each rank under ``explorer.collect()``. HTA must find the two ranks from the files
alone (it searches each file for the text ``"rank": N``), and the TensorBoard plugin must
read each file's steps and rank.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

import explorer
from explorer.collect.trace_writer import encode_trace
from tests.job.job_runs import SCRIPT
from tests.peers.peers import hta_analysis, run_tb

#: HTA's own pattern (hta/common/trace_file.py, create_rank_to_trace_dict).
HTA_RANK = re.compile(r'"rank":\s+(\d+)')


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("job2")
    r = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), "--world", "2", "--steps", "3", "--delay-ms", "5"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def test_hta_finds_every_rank_of_a_collected_job(job: Path) -> None:
    files = sorted(job.glob("rank*.pt.trace.json.gz"))
    assert len(files) == 2
    ta = hta_analysis({}, str(job))
    assert sorted(ta.t.traces) == [0, 1]
    for rank, path in ta.t.trace_files.items():
        assert Path(path).name == f"rank{rank}.pt.trace.json.gz"
        assert ta.t.traces[rank]["ts"].notna().all()


def test_the_plugin_reads_each_rank_with_its_steps(job: Path) -> None:
    for rank in (0, 1):
        path = job / f"rank{rank}.pt.trace.json.gz"
        tb = run_tb(path)
        assert not tb.error, tb.error
        ours = explorer.load(path)
        assert ours.metadata["rank"] == rank
        assert [s["name"] for s in tb.steps] == [str(n) for n in ours.steps()["step"]]


def test_the_first_rank_text_in_the_file_is_the_distributed_rank(job: Path) -> None:
    """HTA takes the first ``"rank": N`` in the file: it must be ``distributedInfo``'s, not a
    rank inside an event's args or Explorer's own block."""
    for rank in (0, 1):
        text = gzip.decompress((job / f"rank{rank}.pt.trace.json.gz").read_bytes()).decode()
        first = HTA_RANK.search(text)
        assert first is not None and int(first.group(1)) == rank
        assert text.index('"distributedInfo"') < first.start()


def test_encoding_is_the_same_document() -> None:
    """Only the layout of distributedInfo changes: the document decodes to what was given."""
    import json

    doc = {
        "schemaVersion": 1,
        "traceEvents": [{"ph": "X", "name": "a", "ts": 1.5, "dur": 2, "args": {"rank": 7}}],
        "distributedInfo": {"backend": "gloo", "rank": 3, "world_size": 4},
        "explorer": {"rank": 3},
    }
    raw = encode_trace(doc)
    assert json.loads(raw) == doc
    assert int(HTA_RANK.search(raw.decode()).group(1)) == 3
    assert json.loads(encode_trace({"distributedInfo": {"rank": 0}})) == {
        "distributedInfo": {"rank": 0}
    }
    assert json.loads(encode_trace({"traceEvents": []})) == {"traceEvents": []}


@pytest.mark.parametrize("job_dir", ["ddp_4rank_slow_input", "ddp_4rank_broadcast_chain"])
def test_hta_finds_the_four_ranks_of_each_sample_job(job_dir: str) -> None:
    """The sample jobs (collected by explorer.collect, stored in the writer's layout)."""
    from tests.conftest import SAMPLE_TRACES

    ta = hta_analysis({}, str(SAMPLE_TRACES / job_dir))
    assert sorted(ta.t.traces) == [0, 1, 2, 3]
    for rank, path in ta.t.trace_files.items():
        assert Path(path).name == f"rank{rank}.pt.trace.json.gz"
