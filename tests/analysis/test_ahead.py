"""Analyses computed ahead in a forked child (:mod:`explorer.analysis.ahead`): the same
results as computed in one process, kept and stored by the parent, nothing written by
the child, and a child that fails costs nothing but the work done again. Real processes
(pytest's own worker runs threads, where nothing is forked), real sample traces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from explorer.analysis.ahead import workers_wanted
from explorer.errors import UsageError
from tests.conftest import SAMPLE_TRACES

ROOT = Path(__file__).resolve().parents[2]
DATALOADER = SAMPLE_TRACES / "cpu_slow_dataloader.pt.trace.json.gz"
NEURON = SAMPLE_TRACES / "neuron_cnn.pt.trace.json.gz"


def _python(script: str, *args: str, env: dict[str, str]) -> dict:
    """Run ``script`` in a fresh interpreter (its only thread: a fork is allowed there);
    its last stdout line, as JSON."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


ADOPTED = """
import json, os, sys
import pandas as pd
import explorer
from explorer.analysis.ahead import compute_ahead, run_forked
from explorer.analysis.breakdown import breakdown
from explorer.analysis.findings import findings
from explorer.analysis.whatif import predicted_findings

path = sys.argv[1]
t = explorer.load(path).data
names = ("breakdown", "findings")
with compute_ahead(t, (breakdown, findings), names) as ahead:
    ahead.join()
child_pid = run_forked(t, os.getpid).result()
# Kept as computed by the child: not computed again here (the memo holds them already).
kept = t.memo.kept(names)
alone = explorer.load(path, use_cache=False).data  # the same analyses in this process only
print(json.dumps({
    "adopted": ahead.adopted,
    "forked": child_pid is not None and child_pid != os.getpid(),
    "kept": sorted(n for n, _ in kept),
    "same_breakdown": breakdown(t).equals(breakdown(alone)),
    "same_findings": [f.to_dict() for f in findings(t)] == [f.to_dict() for f in findings(alone)],
    "findings": len(findings(t)),
    "predicted": [f.to_dict() for f in predicted_findings(t)],
}))
"""


@pytest.mark.parametrize("trace", [DATALOADER, NEURON], ids=["dataloader", "neuron"])
def test_the_childs_results_are_kept_and_equal_one_processs(trace: Path, tmp_path: Path) -> None:
    got = _python(
        ADOPTED,
        str(trace),
        env={"EXPLORER_CACHE_DIR": str(tmp_path / "a"), "EXPLORER_ANALYSIS_WORKERS": "1"},
    )
    assert got["forked"] and got["adopted"]
    assert got["kept"] == ["breakdown", "findings"]
    assert got["same_breakdown"] and got["same_findings"]
    assert got["findings"] > 0
    # The replays priced in a child (while the path is found here) and in this process
    # rank the same findings with the same savings and notes.
    alone = _python(
        ADOPTED,
        str(trace),
        env={"EXPLORER_CACHE_DIR": str(tmp_path / "b"), "EXPLORER_ANALYSIS_WORKERS": "0"},
    )
    assert not alone["forked"] and not alone["adopted"]
    assert got["predicted"] == alone["predicted"]
    assert any(f["predicted_saving_ns"] > 0 for f in got["predicted"])


FAILING = """
import json, os, sys
import explorer
from explorer.analysis.ahead import run_forked
from explorer.analysis.findings import findings

t = explorer.load(sys.argv[1]).data
def boom():
    raise RuntimeError("an analysis failed in the child")
raised = run_forked(t, boom).result()
killed = run_forked(t, lambda: os._exit(3)).result()
print(json.dumps({"raised": raised, "killed": killed, "findings": len(findings(t))}))
"""


def test_a_child_that_fails_or_dies_leaves_the_work_to_this_process(tmp_path: Path) -> None:
    got = _python(
        FAILING,
        str(DATALOADER),
        env={"EXPLORER_CACHE_DIR": str(tmp_path), "EXPLORER_ANALYSIS_WORKERS": "1"},
    )
    assert got == {"raised": None, "killed": None, "findings": got["findings"]}
    assert got["findings"] > 0


NO_WRITES = """
import json, sys
from pathlib import Path
import explorer
from explorer.analysis.ahead import compute_ahead, run_forked
from explorer.analysis.findings import findings

cache = Path(sys.argv[2])
def files():
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file())
t = explorer.load(sys.argv[1]).data
before = files()
in_child = run_forked(t, lambda: (len(findings(t)), files())).result()
with compute_ahead(t, (findings,), ("findings",)) as ahead:
    ahead.join()
print(json.dumps({"before": before, "in_child": in_child[1], "found": in_child[0],
                  "after": files(), "adopted": ahead.adopted}))
"""


def test_the_child_stores_nothing_and_this_process_stores_what_it_keeps(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    got = _python(
        NO_WRITES,
        str(DATALOADER),
        str(cache),
        env={"EXPLORER_CACHE_DIR": str(cache), "EXPLORER_ANALYSIS_WORKERS": "1"},
    )
    assert got["found"] > 0 and got["adopted"]
    assert got["in_child"] == got["before"]  # the child computed the findings, wrote nothing
    assert set(got["after"]) > set(got["before"])  # kept here, and stored beside the tables


RIDERS = """
import json, os, sys
import explorer
import explorer.analysis.ahead as ahead
from explorer.analysis.ahead import riding_along, run_forked
from explorer.analysis.by_source import by_source
from explorer.analysis.findings import findings  # noqa: F401 - its memo key

t = explorer.load(sys.argv[1]).data
alone = explorer.load(sys.argv[1], use_cache=False).data
# by_source rides with the next child forked for t: made there after its work, kept here
with riding_along(t, (by_source,), ("by_source",)):
    child = run_forked(t, os.getpid).result()
    held = t.memo.available("by_source")
    # nothing rides with the next child: the rider was taken by the first
    again = run_forked(t, lambda: [t.memo.available("by_source"), len(ahead._RIDERS)]).result()
# a rider for another trace, and one whose call fails in the child: neither is kept
def boom(trace):
    raise RuntimeError("failed in the child")
other = explorer.load(sys.argv[1], use_cache=False).data
with riding_along(other, (by_source,), ("by_source",)), riding_along(t, (boom,), ("findings",)):
    value = run_forked(t, lambda: 7).result()
print(json.dumps({
    "forked": child is not None and child != os.getpid(), "held": held, "again": again,
    "same": by_source(t).equals(by_source(alone)), "value": value,
    "other_held": other.memo.available("by_source"), "findings_held": t.memo.available("findings"),
}))
"""


def test_work_riding_with_a_child_is_made_there_and_kept_here(tmp_path: Path) -> None:
    got = _python(
        RIDERS,
        str(DATALOADER),
        env={"EXPLORER_CACHE_DIR": str(tmp_path), "EXPLORER_ANALYSIS_WORKERS": "1"},
    )
    assert got["forked"] and got["held"] and got["same"]
    assert got["again"] == [True, 0]  # the next child inherits it kept; nothing rides again
    assert got == {**got, "value": 7, "other_held": False, "findings_held": False}


@pytest.mark.parametrize("trace", [DATALOADER, NEURON], ids=["dataloader", "neuron"])
def test_a_report_is_the_same_with_and_without_the_child(trace: Path, tmp_path: Path) -> None:
    out = {}
    for workers in ("1", "0"):
        proc = subprocess.run(
            [sys.executable, "-m", "explorer", "report", str(trace), "--format", "json"],
            env={
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "EXPLORER_CACHE_DIR": str(tmp_path / workers),
                "EXPLORER_ANALYSIS_WORKERS": workers,
            },
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        doc = json.loads(proc.stdout)
        doc["trace"].pop("opened_from", None)
        out[workers] = doc
    assert out["1"] == out["0"]
    assert out["1"]["findings"]


def test_the_setting_says_what_it_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    import explorer

    trace = explorer.load(DATALOADER, use_cache=False).data
    monkeypatch.setenv("EXPLORER_ANALYSIS_WORKERS", "0")
    assert workers_wanted(trace) == 0
    monkeypatch.setenv("EXPLORER_ANALYSIS_WORKERS", "1")
    assert workers_wanted(trace) == 1
    monkeypatch.delenv("EXPLORER_ANALYSIS_WORKERS")
    assert workers_wanted(trace) == 0  # a sample trace is too small for a fork to pay
    monkeypatch.setenv("EXPLORER_ANALYSIS_WORKERS", "2")
    with pytest.raises(UsageError, match="EXPLORER_ANALYSIS_WORKERS is '2'"):
        workers_wanted(trace)


def test_a_report_whose_results_are_stored_builds_no_graph(tmp_path: Path) -> None:
    """Another ``--top`` (another stored document) from stored results: the graph the
    child would overlap is not built at all, and the report equals the first one's."""
    import shutil

    import explorer
    from explorer.report import document

    path = tmp_path / DATALOADER.name
    shutil.copy(DATALOADER, path)
    first = document(explorer.load(path).data, top=3)
    again = explorer.load(path).data
    assert again.memo.available("predicted_findings")
    second = document(again, top=3 + 1)
    assert again.memo.peek("dependency_graph", (None, True)) is None
    assert second["findings"][:3] == first["findings"]


REPORT_KEPT = """
import json, sys
import explorer
from explorer.analysis.ahead import compute_ahead
from explorer.report.trace_document import AHEAD_CALLS, AHEAD_KEPT

t = explorer.load(sys.argv[1]).data
with compute_ahead(t, AHEAD_CALLS, AHEAD_KEPT) as ahead:
    ahead.join()
print(json.dumps({"adopted": ahead.adopted, "held": sorted({n for n, _ in t.memo.kept(AHEAD_KEPT)})}))
"""


def test_the_reports_child_hands_back_what_the_critical_path_reads_next(tmp_path: Path) -> None:
    """The report's child hands back, beside the breakdown and findings, the results of
    theirs that the critical path reads after the graph (the device slices' reasons, the
    slices' source frames): this process does not compute them again."""
    got = _python(
        REPORT_KEPT,
        str(NEURON),
        env={"EXPLORER_CACHE_DIR": str(tmp_path), "EXPLORER_ANALYSIS_WORKERS": "1"},
    )
    assert got["adopted"]
    assert {"breakdown", "findings", "frame_codes", "device_slice_reasons"} <= set(got["held"])


OFF_MAIN = """
import _thread, json, os, sys
import explorer
from explorer.analysis.ahead import run_forked

t = explorer.load(sys.argv[1]).data
main = run_forked(t, os.getpid).result() is not None
done, got = _thread.allocate_lock(), {}
done.acquire()
def off_main():  # a thread threading does not list, as a viewer's QThread is
    got["pid"] = run_forked(t, os.getpid).result()
    done.release()
_thread.start_new_thread(off_main, ())
done.acquire()
print(json.dumps({"off_main": got["pid"], "main": main}))
"""


def test_nothing_is_forked_off_the_main_thread(tmp_path: Path) -> None:
    """Called from a thread ``threading`` does not count (a Qt thread), no child is
    forked and the work is left to that thread; from the main thread one is."""
    got = _python(
        OFF_MAIN,
        str(DATALOADER),
        env={"EXPLORER_CACHE_DIR": str(tmp_path), "EXPLORER_ANALYSIS_WORKERS": "1"},
    )
    assert got == {"off_main": None, "main": True}


EXPORTED = """
import json, sys
from pathlib import Path
import explorer
from explorer.export import to_perfetto
from explorer.export.results import PendingResults

path, out, late = sys.argv[1], Path(sys.argv[2]), sys.argv[3] == "late"
t = explorer.load(path).data
with PendingResults(t) as pending:
    if late:  # this process busy until the child, done with the path, takes the findings
        import time
        from explorer.export.results import IN_CHILD
        give_up = time.monotonic() + 120
        while pending._claim is not None and pending._claim.value != IN_CHILD:
            assert time.monotonic() < give_up, "the child never took the findings"
            time.sleep(0.01)
    taker = None if pending._claim is None else pending._claim.value
    got = pending.get()
    taker = taker or (None if pending._claim is None else pending._claim.value)
    from_child = pending.path_from_child
    kept_here = t.memo.peek("critical_path", (None, True)) is not None
to_perfetto(explorer.load(path).data, out)  # the whole export, as the command writes it
again = explorer.load(path).data  # reopened: the path the export stored
print(json.dumps({
    "from_child": from_child,
    "kept_here": kept_here,
    "taker": taker,
    "slices": [s.name for s in got.slices],
    "runs": got.path.astype(str).values.tolist(),
    "flows": got.flows.astype(str).values.tolist(),
    "stored": again.memo.available("critical_path", (None, True)),
}))
"""


@pytest.mark.parametrize("trace", [DATALOADER, NEURON], ids=["dataloader", "neuron"])
def test_an_export_is_the_same_with_and_without_the_path_in_a_child(
    trace: Path, tmp_path: Path
) -> None:
    """The export's critical path is found in a child while the trace's own event tables
    are made here, and the events encoded but for their lengths and flow ids, and the
    findings by whichever process gets to them first: the same results and the same file,
    byte for byte, as in one process (which encodes each chunk as it writes it), and the
    path stored for the next report."""
    got = {}
    for workers, when in (("1", "now"), ("0", "now"), ("late", "late")):
        got[workers] = _python(
            EXPORTED,
            str(trace),
            str(tmp_path / f"{workers}.pftrace"),
            when,
            env={
                "EXPLORER_CACHE_DIR": str(tmp_path / f"cache{workers}"),
                "EXPLORER_ANALYSIS_WORKERS": "0" if workers == "0" else "1",
            },
        )
    assert got["1"]["from_child"] and not got["0"]["from_child"]
    # the child stored the path itself and handed back only its runs and flows: this
    # process never held it (found here, it keeps it)
    assert not got["1"]["kept_here"] and got["0"]["kept_here"]
    # the findings: found here when this process gets to them first, else by the child
    # once done with the path — the same findings either way
    assert got["1"]["taker"] == 1 and got["0"]["taker"] is None
    assert got["late"]["taker"] == 2 and got["late"]["from_child"]
    for key in ("slices", "runs", "flows"):
        assert got["late"][key] == got["0"][key], key
    assert got["1"]["stored"] and got["0"]["stored"]
    assert got["1"]["runs"] and got["1"]["slices"]
    for key in ("slices", "runs", "flows"):
        assert got["1"][key] == got["0"][key], key
    assert (tmp_path / "1.pftrace").read_bytes() == (tmp_path / "0.pftrace").read_bytes()


EARLY = """
import json, os, sys, time
from pathlib import Path
import numpy as np
import explorer
from explorer.analysis.ahead import compute_ahead
from explorer.analysis.classify import classes
from explorer.analysis.dependency_graph import READ_FIRST, read_first
from explorer.analysis.findings import findings
from explorer.analysis.steps import steps

path, mode, flag = sys.argv[1], sys.argv[2], Path(sys.argv[3])
done = flag.parent / "later_done"
t = explorer.load(path).data
def later(trace):  # the child's later work: it ends only once the early results are taken
    deadline = time.monotonic() + 60
    while not flag.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    done.write_text(json.dumps(flag.exists()))
    findings(trace)
def boom(trace):
    raise RuntimeError("an early call failed in the child")
first = (boom,) if mode == "failing" else (read_first,)
with compute_ahead(t, (later,), ("findings",), first, READ_FIRST) as ahead:
    ahead.take_early()
    early = sorted(n for n in READ_FIRST if t.memo.kept((n,)))
    flag.write_text("taken")  # only now may the child's later work end
    ahead.join()
alone = explorer.load(path, use_cache=False).data
same = bool(steps(t).equals(steps(alone))) and all(
    np.array_equal(getattr(classes(t), c), getattr(classes(alone), c))
    for c in ("host_sync", "collective", "input", "operator")
)
print(json.dumps({"early": early, "adopted": ahead.adopted, "same": same,
                  "later": json.loads(done.read_text()) if done.exists() else None,
                  "findings": len(findings(t))}))
"""


@pytest.mark.parametrize("mode", ["sent", "failing", "no child"])
def test_the_childs_early_results_are_kept_before_it_is_done(mode: str, tmp_path: Path) -> None:
    """``compute_ahead``'s early calls come back as soon as the child has made them (a
    first report's graph build reads them while the child goes on): the child's later
    work here ends only once they are taken. They equal this process's own; when they
    fail in the child, or no child is forked, taking them does not wait and the
    analyses are made here."""
    got = _python(
        EARLY,
        str(DATALOADER),
        "failing" if mode == "failing" else "sent",
        str(tmp_path / "taken"),
        env={
            "EXPLORER_CACHE_DIR": str(tmp_path / "cache"),
            "EXPLORER_ANALYSIS_WORKERS": "0" if mode == "no child" else "1",
        },
    )
    assert got["same"] and got["findings"] > 0
    if mode == "sent":
        # kept here before the join, with nothing computed here meanwhile: the child's
        # (the launcher only where classifying needed it: this CPU trace launches nothing)
        assert {"steps", "slice_classes", "host_slice_reasons"} <= set(got["early"])
        assert got["later"] is True  # taken while the child's later work still waited
        assert got["adopted"]  # and its later results at the join
    else:
        assert got["early"] == []  # nothing kept before the child's end (or at all)
        assert got["later"] is None  # the later work never ran in a child
        assert not got["adopted"]  # a child whose work failed hands back nothing either
