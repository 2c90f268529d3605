"""``explorer export RUN_DIR -o job.pftrace`` on the committed real 4-rank DDP job: every rank
in one Perfetto trace, one process group per rank, on the job report's aligned clock.

Each rank's part of the file is checked against that rank's own single-trace export (made
here from its trace file, not from the job's store), and the alignment on a copy of the job
whose rank 3 was moved to another machine with its clock 7 ms ahead. ``explorer diff`` of
two jobs is checked on the sample job against a copy with ranks 0 and 2 swapped.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from job_runs import run_cli

import explorer
from explorer.export import to_perfetto
from explorer.job import job_document

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "export"))
from pftrace_check import Parsed, check  # noqa: E402

SKEW_NS = 7_000_000


@pytest.fixture(scope="module")
def skewed_job(sample_job: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample job with rank 3 on host ``node-b`` whose clock reads 7 ms ahead."""
    out = tmp_path_factory.mktemp("skewed")
    for r in range(4):
        src = sample_job / f"rank{r}.pt.trace.json.gz"
        doc = json.loads(gzip.decompress(src.read_bytes()))
        if r == 3:
            doc["host_name"] = doc["explorer"]["environment"]["host"] = "node-b"
            doc["baseTimeNanoseconds"] += SKEW_NS
        (out / src.name).write_bytes(gzip.compress(json.dumps(doc).encode()))
    return out


def _rank_of_track(p: Parsed) -> dict[int, int]:
    """Track uuid → K for every track under a process named ``rank K``."""
    ranks = {
        u: int(m.group(1))
        for u, d in p.descriptors.items()
        if d.HasField("process") and (m := re.fullmatch(r"rank (\d+)", d.process.process_name))
    }
    out = {}
    for u in p.descriptors:
        top = u
        while p.descriptors[top].HasField("parent_uuid"):
            top = p.descriptors[top].parent_uuid
        if top in ranks:
            out[u] = ranks[top]
    return out


def _starts(p: Parsed, tracks: set[int] | None = None) -> Counter:
    """(name, start) of every slice on ``tracks`` (all when None), as a multiset."""
    return Counter((n, s) for u, n, s, _ in p.completed if tracks is None or u in tracks)


def _export_job(job: Path, out: Path, store: Path) -> tuple[Parsed, str]:
    r = run_cli("export", str(job), "-o", str(out), "--store", str(store), "--workers", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    return check(out), r.stdout


def test_job_export_has_one_group_per_rank_each_as_its_own_export(
    sample_job: Path, tmp_path: Path
) -> None:
    p, stdout = _export_job(sample_job, tmp_path / "job.pftrace", tmp_path / "store")
    groups = sorted(d.process.process_name for d in p.descriptors.values() if d.HasField("process"))
    assert groups == ["rank 0", "rank 1", "rank 2", "rank 3"]
    rank_of = _rank_of_track(p)
    assert set(rank_of) == set(p.descriptors)  # every row belongs to a rank
    per_rank = Counter(rank_of[u] for u, *_ in p.completed)
    total = 0
    for r in range(4):
        own = check(
            to_perfetto(
                explorer.load(sample_job / f"rank{r}.pt.trace.json.gz").data, tmp_path / f"{r}.pf"
            ).path
        )
        assert per_rank[r] == own.slices > 1000
        total += own.slices
        # one machine, one clock: the report shifts no rank, and neither does the export
        mine = {u for u, k in rank_of.items() if k == r}
        assert _starts(p, mine) == _starts(own)
    assert p.slices == total
    assert "rank 0 0 ns, rank 1 0 ns, rank 2 0 ns, rank 3 0 ns" in stdout


def test_job_export_shifts_each_rank_by_the_reports_clock_offset(
    sample_job: Path, skewed_job: Path, tmp_path: Path
) -> None:
    doc = job_document(str(skewed_job), store=tmp_path / "report-store", workers=2)
    shift = {r["rank"]: r["clock_offset_ns"] for r in doc["ranks"]}
    assert shift[0] == shift[1] == shift[2] == 0  # the reference machine
    # every collective end of rank 3 moved by exactly the planted 7 ms: so did their median
    plain = job_document(str(sample_job), store=tmp_path / "plain-store", workers=2)
    assert shift[3] == plain["ranks"][3]["collective_end_offset_ns"] + SKEW_NS
    p, stdout = _export_job(skewed_job, tmp_path / "job.pftrace", tmp_path / "store")
    assert f"rank 3 {shift[3]:+d} ns" in stdout
    rank_of = _rank_of_track(p)
    own = check(
        to_perfetto(
            explorer.load(skewed_job / "rank3.pt.trace.json.gz").data, tmp_path / "3.pf"
        ).path
    )
    mine = {u for u, k in rank_of.items() if k == 3}
    expected = Counter({(n, s - shift[3]): c for (n, s), c in _starts(own).items()})
    assert _starts(p, mine) == expected
    # rank 0's slices are where its own export puts them
    own0 = check(to_perfetto(explorer.load(skewed_job / "rank0.pt.trace.json.gz").data,
                             tmp_path / "0.pf").path)  # fmt: skip
    assert _starts(p, {u for u, k in rank_of.items() if k == 0}) == _starts(own0)


def test_job_export_refuses_chrome_json(sample_job: Path, tmp_path: Path) -> None:
    r = run_cli("export", str(sample_job), "-o", str(tmp_path / "job.json"))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and ".pftrace" in r.stderr
    assert not (tmp_path / "job.json").exists()


@pytest.fixture(scope="module")
def swapped_job(sample_job: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample job with the traces of ranks 0 and 2 swapped (by file name)."""
    out = tmp_path_factory.mktemp("swapped")
    for r, src in {0: 2, 1: 1, 2: 0, 3: 3}.items():
        (out / f"rank{r}.pt.trace.json.gz").write_bytes(
            (sample_job / f"rank{src}.pt.trace.json.gz").read_bytes()
        )
    return out


def test_job_diff_compares_rank_by_rank(sample_job: Path, swapped_job: Path) -> None:
    r = run_cli("diff", str(sample_job), str(swapped_job), "--format", "json", "--workers", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads(r.stdout)
    medians = {  # straight from each trace's own steps
        k: int(np.median(explorer.load(sample_job / f"rank{k}.pt.trace.json.gz").steps()["dur_ns"]))
        for k in range(4)
    }
    assert [x["rank"] for x in d["ranks"]] == [0, 1, 2, 3]
    for x in d["ranks"]:
        k = x["rank"]
        b = {0: 2, 2: 0}.get(k, k)
        assert (x["median_step_ns_a"], x["median_step_ns_b"]) == (medians[k], medians[b])
        assert x["delta_ns"] == medians[b] - medians[k]
    assert d["straggler_a"]["rank"] == 2 and d["straggler_b"]["rank"] == 0
    assert d["straggler_changed"] is True
    text = run_cli("diff", str(sample_job), str(swapped_job), "--workers", "2")
    assert text.returncode == 0 and "Straggler: rank 2 (" in text.stdout
    assert "-> rank 0 (" in text.stdout


def test_job_diff_refuses_a_job_against_one_trace(sample_job: Path) -> None:
    r = run_cli("diff", str(sample_job), str(sample_job / "rank0.pt.trace.json.gz"))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and "is one trace" in r.stderr
