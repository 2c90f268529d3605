"""The job report on the committed real 4-rank DDP job (sample_traces/ddp_4rank_slow_input)
and on two ranks of a real NVIDIA job (../shared/traces), checked against numbers computed
here straight from the traces."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from job_runs import run_cli

import explorer
from explorer.job import job_document
from explorer.job.render import FORMATS, render


@pytest.fixture(scope="module")
def sample_doc(sample_job: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    return job_document(str(sample_job), store=tmp_path_factory.mktemp("store"), workers=2)


def _gloo_ops(trace: explorer.Trace, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Absolute start and end (ns) of each ``name`` gloo execution range, in start order."""
    s = trace.slices
    rows = s[s["name"].astype(str) == name].sort_values("ts")
    base = trace.metadata["start_ns"]
    return rows["ts"].to_numpy() + base, (rows["ts"] + rows["dur"]).to_numpy() + base


def test_sample_job_names_rank_2_and_its_input_stall(sample_doc: dict, sample_job: Path) -> None:
    info = json.loads((sample_job / "job.info").read_text())
    s = sample_doc["straggler"]
    assert s is not None and s["rank"] == info["slow_rank"] == 2
    first = s["causes"][0]
    assert first["what"] == "input_stall"
    # the straggler's own trace has that finding; the other ranks have none of it
    own = {r: explorer.load(sample_job / f"rank{r}.pt.trace.json.gz").findings() for r in range(4)}
    stall = [f for f in own[2] if f.kind == "input_stall"]
    assert stall and first["rank_ns_per_step"] == pytest.approx(
        stall[0].time_lost_ns / sample_doc["ranks"][2]["steps"], rel=1e-6
    )
    # the source line is the one the rank's own finding names, in the training script
    file, line, function = stall[0].source_lines[0]
    assert (first["file"], first["line"], first["function"]) == (file, line, function)
    # ... the statement that holds the loading time (the dataset's sleep standing for slow
    # decoding), not the `with explorer.collect` line torch names the loop's frame by
    assert Path(file).name == "make_job_traces.py" and function == "__getitem__"
    # (read from the copy of the capturing script kept beside the traces)
    script = sample_job / "make_job_traces.py"
    assert "time.sleep(" in script.read_text().splitlines()[line - 1]
    assert not any(f.kind == "input_stall" for r in (0, 1, 3) for f in own[r])


def test_step_matrix_and_waits_match_the_traces(sample_doc: dict, sample_job: Path) -> None:
    traces = {r: explorer.load(sample_job / f"rank{r}.pt.trace.json.gz") for r in range(4)}
    for r, t in traces.items():  # rank × step straight from each trace's steps
        assert sample_doc["step_matrix"][str(r)] == t.steps()["dur_ns"].tolist()
    # every all_reduce: who entered last, computed by brute force on the raw times (one
    # host, one clock; alignment shifts are small next to the skews compared here)
    starts = np.array([_gloo_ops(t, "gloo:all_reduce")[0] for t in traces.values()])
    rows = [c for c in sample_doc["collectives"]["rows"] if c["op"] == "allreduce"]
    assert len(rows) == starts.shape[1]
    for k, row in enumerate(rows):
        skew = starts[:, k].max() - starts[:, k].min()
        assert row["skew_ns"] == pytest.approx(skew, abs=3e6)
        if skew > 10e6:
            assert row["last_rank"] == int(starts[:, k].argmax())
        assert row["wait_ns"] + row["transfer_ns"] == row["dur_ns"]
        assert row["wait_ns"] >= 0 and row["transfer_ns"] >= 0
    # bytes: DDP's one bucket holds every parameter as float32
    n_params = 128 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10
    assert {r["bytes"] for r in rows} == {4 * n_params}
    # the others' wait for rank 2 adds up from the collectives it entered last
    caused = sum(
        c["caused_wait_ns"] for c in sample_doc["collectives"]["rows"] if c["last_rank"] == 2
    )
    assert sample_doc["ranks"][2]["caused_wait_ns"] == caused


def test_ranks_on_one_host_share_its_clock(sample_doc: dict) -> None:
    import socket

    assert {r["host"] for r in sample_doc["ranks"]} == {socket.gethostname()}
    assert [r["clock_offset_ns"] for r in sample_doc["ranks"]] == [0, 0, 0, 0]
    # what the collective ends alone say: the reference is 0, the rest within scheduling
    # noise of one busy machine
    measured = [r["collective_end_offset_ns"] for r in sample_doc["ranks"]]
    assert measured[0] == 0 and all(abs(o) < 50_000_000 for o in measured), measured


def test_every_format_says_the_same(sample_doc: dict) -> None:
    out = {fmt: render(sample_doc, fmt) for fmt in FORMATS}
    assert json.loads(out["json"]) == sample_doc
    assert sample_doc["schema_version"] == 3
    for fmt in ("text", "markdown", "html"):
        assert "rank 2: input stall" in out[fmt]
        assert "Straggler: rank 2" in out[fmt]
    assert out["html"].lower().startswith("<!doctype html>")  # one page writer for all
    # the HTML page draws the step matrix: one shaded cell per rank and step with a time
    (heat,) = re.findall(r"<svg class='chart' data-chart='heatmap'.*?</svg>", out["html"])
    cells = [d for row in sample_doc["step_matrix"].values() for d in row if d is not None]
    assert heat.count("<rect") == len(cells) > 0
    assert "| rank |" in out["markdown"]


def test_existing_dask_cluster_gives_the_same_report(
    sample_job: Path, sample_doc: dict, tmp_path: Path
) -> None:
    import subprocess
    import sys
    import time

    from distributed import Client

    sched_file = tmp_path / "scheduler.json"
    dask = Path(sys.executable).parent / "dask"
    procs = [
        subprocess.Popen(
            [
                str(dask),
                "scheduler",
                "--scheduler-file",
                str(sched_file),
                "--port",
                "0",
                "--no-dashboard",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
    ]
    try:
        deadline = time.monotonic() + 60
        while not sched_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        procs.append(
            subprocess.Popen(
                [
                    str(dask),
                    "worker",
                    "--scheduler-file",
                    str(sched_file),
                    "--nworkers",
                    "2",
                    "--nthreads",
                    "1",
                    "--no-dashboard",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
        )
        address = json.loads(sched_file.read_text())["address"]
        with Client(address, timeout="30s", set_as_default=False) as c:
            c.wait_for_workers(2, timeout=90)
        r = run_cli(
            "report", str(sample_job), "--format", "json", "--scheduler", address,
            "--store", str(tmp_path / "store"),
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        remote = json.loads(r.stdout)
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=30)
    local = dict(sample_doc)
    assert remote.pop("store") != local.pop("store")
    assert remote == local


def test_two_real_nvidia_ranks(shared_traces: Path, tmp_path: Path) -> None:
    pattern = str(shared_traces / "*sampled_rank-*.json.gz")
    doc = job_document(pattern, store=tmp_path / "store", workers=1)
    assert doc["ranks_present"] == 2 and doc["world_size"] == 128
    assert any("2 of 128 ranks" in w for w in doc["warnings"])
    # collectives matched by order within each operation: as many as both ranks ran
    per_rank = []
    for name in ("timeline_analysis__sampled_rank-0", "trace_filter__sampled_rank-1"):
        t = explorer.load(shared_traces / f"{name}.json.gz")
        per_rank.append(int((t.slices["kind"] == "collective").sum()))
    assert doc["collectives"]["matched"] == min(per_rank)
    for c in doc["collectives"]["rows"]:
        assert c["wait_ns"] + c["transfer_ns"] == c["dur_ns"] and c["wait_ns"] >= 0
    # the two ranks' steps are the same steps (ProfilerStep numbers from each trace)
    assert doc["steps"] == [551, 552]


def test_job_errors_are_one_line(sample_job: Path, tmp_path: Path) -> None:
    r = run_cli("report", str(tmp_path / "none" / "*.json.gz"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "matches no files" in r.stderr
    r = run_cli("report", str(sample_job), "--fail-on", "input_stall>3%")
    assert r.returncode == 2 and "for a job the metric is one of" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_store_that_cannot_be_written_is_one_line(sample_job: Path, tmp_path: Path) -> None:
    """``--store`` under a file, and a store whose disk fills up (no file may grow past
    64 KiB: a real ``RLIMIT_FSIZE``, which every process of the job inherits), each end in
    one line that names the directory and says what to do; nothing half-written is left."""
    import os
    import resource
    import subprocess
    import sys

    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    r = run_cli("report", str(sample_job), "--store", str(blocker / "store"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"explorer: error: {blocker / 'store'}: Not a directory — ")

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))

    store = tmp_path / "store"
    r = subprocess.run(
        [sys.executable, "-m", "explorer", "report", str(sample_job), "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=small_files,
        env={**os.environ, "EXPLORER_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    error = [line for line in r.stderr.splitlines() if line.startswith("explorer: error:")]
    assert len(error) == 1, r.stderr
    assert f"{store}{os.sep}rank-" in error[0] and "cannot write (File too large)" in error[0]
    assert sorted(p.name for p in store.iterdir()) == ["job_store.txt"]


def test_a_rank_cut_short_is_said_beside_the_verdict(sample_job: Path, tmp_path: Path) -> None:
    """A rank whose trace was cut short (a killed run) is analysed from what was recovered;
    the Summary, which names the straggler, says to read the warnings first, and names the
    first one, in every format for people — not only the Warnings section at the end (JSON
    carries the warnings as a list of their own)."""
    import shutil

    job = tmp_path / "job"
    shutil.copytree(sample_job, job)
    (cut,) = job.glob("rank2.*")
    data = cut.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    doc = job_document(str(job), store=tmp_path / "store", workers=2, use_cache=False)
    assert any("rank 2" in w and "cut short" in w for w in doc["warnings"]), doc["warnings"]
    n = len(doc["warnings"])
    for fmt in ("text", "markdown", "html"):
        text = render(doc, fmt)
        summary = text[: text.index("Straggler:")]
        assert f"Read the {n} warnings under Warnings" in summary, (fmt, summary)
        assert doc["warnings"][0] in summary, fmt
    clean = render(job_document(str(sample_job), store=tmp_path / "store2", workers=2), "text")
    assert "under Warnings" not in clean  # the sample job itself has no warnings


def test_a_corrupt_rank_is_left_out_and_said_first(sample_job: Path, tmp_path: Path) -> None:
    """One unreadable rank file does not sink the job: the other ranks are analysed (the
    straggler is still rank 2) and the first warning says which rank was left out."""
    import shutil

    run = tmp_path / "run"
    run.mkdir()
    for r in range(4):
        shutil.copy(sample_job / f"rank{r}.pt.trace.json.gz", run)
    (run / "rank3.pt.trace.json.gz").write_bytes(b"\x1f\x8b not gzip at all")
    r = run_cli("report", str(run), "--store", str(tmp_path / "store"), "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ranks_present"] == 3 and doc["world_size"] == 4
    assert doc["warnings"][0].startswith("rank 3 is left out: "), doc["warnings"]
    assert "rank3.pt.trace.json.gz" in doc["warnings"][0]
    assert doc["straggler"] is not None and doc["straggler"]["rank"] == 2
    text = run_cli("report", str(run), "--store", str(tmp_path / "store"))
    assert "the first: rank 3 is left out" in text.stdout


def test_ranks_table_step_time_is_per_step(sample_doc: dict) -> None:
    """The Ranks table's "step time" is the rank's mean step (its step-matrix row), not the
    sum over its steps."""
    from explorer.units import fmt_ns

    text = render(sample_doc, "text")
    section = text[text.index("\nRanks\n") :].split("\n\n")
    table = next(p for p in section if p.lstrip().startswith("rank  step time")).splitlines()
    rows = [ln for ln in table[1:] if ln.strip()]
    for r in sample_doc["ranks"]:
        durs = sample_doc["step_matrix"][str(r["rank"])]
        row = next(ln for ln in rows if ln.split()[0] == str(r["rank"]))
        assert fmt_ns(sum(durs) / len(durs)) in row, (row, durs)
        assert fmt_ns(sum(durs)) not in row or len(durs) == 1, row
    assert len(rows) == len(sample_doc["ranks"])
