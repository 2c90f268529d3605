"""Fallbacks, copies, device names and source lines on any PrivateUse1 backend.

The same training script (``neuron_train.py``) runs on three devices, each in a process of
its own under ``explorer.collect``: Explorer's ``neuron`` test backend (device timeline
through Explorer's own module), ``neuron_sim`` — a backend written as a third party writes
one (a ``__torch_dispatch__`` wrapper tensor, installed into a ``site-packages`` directory,
no Explorer code, no device timeline) — and the plain CPU. Every test runs on all three.
Expected values come from the script's marker comments and from the raw trace events,
never from Explorer's own output.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import explorer
from explorer.analysis.device_naming import device_naming
from explorer.cli.main import main as cli
from explorer.trace.source import is_library_path, user_frames
from tests.backends import neuron_train

SCRIPT = Path(neuron_train.__file__)
ROOT = Path(__file__).resolve().parents[2]
VENDOR = Path(__file__).resolve().parent / "vendor_neuron" / "neuron_sim"
BACKENDS = ("neuron", "vendor", "cpu")
STEPS = 4


def _line_of(marker: str) -> int:
    for n, text in enumerate(SCRIPT.read_text().splitlines(), start=1):
        if marker in text:
            return n
    raise AssertionError(f"{marker} not in {SCRIPT}")


class Run:
    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        assert proc.returncode == 0, proc.stderr[-3000:]
        lines = proc.stdout.strip().splitlines()
        self.losses = [float(v) for v in lines[-2].split()]
        self.path = Path(lines[-1])
        self.stderr = proc.stderr
        self.trace = explorer.load(self.path, use_cache=False)

    def events(self) -> list[dict[str, Any]]:
        raw = self.path.read_bytes()
        doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        return list(doc["traceEvents"])


def _run(tmp: Path, backend: str, *extra: str, env: dict[str, str] | None = None) -> Run:
    site = tmp / "venv" / "site-packages"  # as pip would have put it: library code
    if not (site / "neuron_sim").exists():
        shutil.copytree(VENDOR, site / "neuron_sim")
    env = {"PYTHONPATH": f"{ROOT}:{site}", "EXPLORER_CACHE_DIR": str(tmp / "cache"),
           "PATH": "/usr/bin:/bin", "HOME": str(tmp), **(env or {})}  # fmt: skip
    out = tmp / "-".join([backend, *extra, *(env or {}).values()])
    cmd = [sys.executable, str(SCRIPT), str(out), backend, str(STEPS), *extra]
    return Run(subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300))


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("backends")


@pytest.fixture(scope="module")
def runs(tmp: Path) -> dict[str, Run]:
    return {b: _run(tmp, b) for b in BACKENDS}


@pytest.fixture(scope="module")
def plain(tmp: Path) -> dict[str, Run]:
    """The same runs recorded by torch.profiler alone: no collector, no warnings kept."""
    return {b: _run(tmp, b, "plain") for b in BACKENDS}


def _sigmoid_calls(
    events: list[dict[str, Any]], marker: str = "aten::_to_cpu"
) -> list[tuple[float, float, float]]:
    """(duration, _to_cpu time, copy-back time) in µs of every ``aten::sigmoid`` that holds
    an ``aten::_to_cpu`` (the innermost, when the dispatcher recorded the call twice) —
    straight from the file's events."""
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]

    def within(e: dict[str, Any], o: dict[str, Any]) -> bool:
        return e is not o and e["tid"] == o["tid"] and o["ts"] <= e["ts"] and e["ts"] + e["dur"] <= o["ts"] + o["dur"]  # fmt: skip

    marks = [e for e in ops if e["name"] == marker]
    sig = [e for e in ops if e["name"] == "aten::sigmoid" and any(within(m, e) for m in marks)]
    out = []
    for s in [s for s in sig if not any(within(o, s) for o in sig)]:
        t0, t1 = s["ts"], s["ts"] + s["dur"]
        inside = [e for e in ops if e["tid"] == s["tid"] and t0 <= e["ts"] and e["ts"] + e["dur"] <= t1 and e is not s]  # fmt: skip
        moves = [e for e in inside if e["name"] == marker and not any(within(e, m) for m in inside if m["name"] == marker)]  # fmt: skip
        if not moves:
            continue
        after = max(m["ts"] + m["dur"] for m in moves)
        kernel = [e for e in inside if e["name"] == "aten::sigmoid" and e["ts"] >= after]
        back_from = kernel[0]["ts"] + kernel[0]["dur"]
        backs = [e for e in inside if e["name"] in ("aten::copy_", "aten::_to_copy") and e["ts"] >= back_from]  # fmt: skip
        outer_backs, reach = [], -1.0
        for b in sorted(backs, key=lambda e: (e["ts"], -e["dur"])):
            if b["ts"] >= reach:
                outer_backs.append(b)
                reach = b["ts"] + b["dur"]
        out.append((s["dur"], sum(m["dur"] for m in moves), sum(b["dur"] for b in outer_backs)))
    return out


# -- the vendor backend itself ------------------------------------------------------------
def test_every_backend_trains_to_the_cpus_losses(runs: dict[str, Run]) -> None:
    assert runs["neuron"].losses == runs["cpu"].losses == runs["vendor"].losses
    assert len(set(runs["cpu"].losses)) > 1


def test_the_vendor_backend_warns_in_its_own_words_and_keeps_no_device_timeline(
    runs: dict[str, Run],
) -> None:
    assert f"neuron_train.py:{_line_of('UNSUPPORTED-OP')}: RuntimeWarning: neuron_sim: aten::sigmoid is not lowered" in runs["vendor"].stderr  # fmt: skip
    assert "not supported on neuron" not in runs["vendor"].stderr  # not Explorer's wording
    assert runs["vendor"].trace.device_tracks().empty
    assert not runs["neuron"].trace.device_tracks().empty
    assert "explorer" not in VENDOR.joinpath("__init__.py").read_text().replace("Explorer", "")


# -- naming -------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_device_is_named_as_the_trace_names_it(
    runs: dict[str, Run], backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = runs[backend]
    meta = run.trace.metadata["explorer"]
    naming = device_naming(run.trace.data)
    assert cli(["report", str(run.path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)["devices"]
    assert cli(["report", str(run.path)]) == 0
    text = capsys.readouterr().out
    if backend == "cpu":
        assert meta["devices_used"] == [] and naming.devices == () and doc["devices"] == []
        assert naming.label == "host only" and "Device:" not in text
        return
    assert meta["privateuse1_backend"] == "neuron" and meta["devices_used"] == ["neuron:0"]
    assert doc["devices"] == ["neuron:0"] and doc["backend"] == "neuron"
    recorded = backend == "neuron"
    assert doc["device_time_recorded"] is recorded
    head = text.splitlines()[:4]  # beside the title, before any table
    assert any(h.startswith("Device: neuron:0 (PrivateUse1 backend 'neuron')") for h in head)
    said = "Device-side time was not recorded" in text
    assert said is not recorded
    assert naming.label == ("neuron:0" if recorded else "neuron:0 (host time only)")


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_viewer_title_and_banner_name_the_device(
    runs: dict[str, Run], backend: str, qtbot: Any, tmp_path: Path
) -> None:
    from PyQt6.QtCore import QSettings, QThreadPool

    from explorer.ui.main_window import MainWindow, device_summary

    run = runs[backend]
    label = {"neuron": "neuron:0", "vendor": "neuron:0 (host time only)", "cpu": "host only"}
    assert device_summary(run.trace, run.trace.breakdown()) == label[backend]
    settings = QSettings(str(tmp_path / "explorer.ini"), QSettings.Format.IniFormat)
    window = MainWindow(settings=settings, restore=False, remember=False)
    qtbot.addWidget(window)
    window.set_trace(run.trace)
    qtbot.waitUntil(lambda: window.analysis is None or window.analysis.isFinished(), timeout=120000)
    QThreadPool.globalInstance().waitForDone(30000)
    assert f" — {label[backend]}" in window.windowTitle()
    banner = window.banner.text() if not window.banner.isHidden() else ""
    assert ("Device-side time was not recorded" in banner) is (backend == "vendor")
    assert ("neuron:0" in banner) is (backend == "vendor")
    assert (banner == "") is (backend == "cpu")


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_job_report_names_the_device(
    runs: dict[str, Run], backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job"
    job.mkdir()
    raw = runs[backend].path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    for rank in (0, 1):  # a job of two ranks: the one run, each copy saying which rank it is
        # (two copies of a single-process run are two runs, which a job report refuses)
        doc["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": 2}
        (job / f"rank{rank}.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    args = ["report", str(job), "--workers", "1", "--store", str(tmp_path / "store")]
    assert cli([*args, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    devices = doc["devices"]
    assert devices["devices"] == ([] if backend == "cpu" else ["neuron:0"])
    assert [r["devices"] for r in doc["ranks"]] == [devices["devices"]] * 2
    assert devices["device_time_recorded"] is (backend != "vendor")
    assert cli(args) == 0
    text = capsys.readouterr().out
    assert ("Devices: neuron:0" in text) is (backend != "cpu")
    assert ("Device-side time was not recorded" in text) is (backend == "vendor")


# -- fallbacks and their copies -----------------------------------------------------------
def _fallback(trace: explorer.Trace) -> Any:
    found = [f for f in trace.findings() if f.kind == "cpu_fallback"]
    assert len(found) <= 1
    return found[0] if found else None


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_fallback_is_found_at_the_users_line_with_its_copy_cost(
    runs: dict[str, Run], backend: str
) -> None:
    run = runs[backend]
    f = _fallback(run.trace)
    raw = _sigmoid_calls(run.events())
    if backend == "cpu":
        assert f is None and raw == []
        return
    line = _line_of("UNSUPPORTED-OP")
    assert f.title.startswith(f"CPU fallback: aten::sigmoid at neuron_train.py:{line}"), f.title
    assert f.source_lines[0][0].endswith("neuron_train.py") and f.source_lines[0][1] == line
    op = f.details["per_op"]["aten::sigmoid"]
    assert op["calls"] == len(raw) == STEPS
    # the op's time and its copies out and back, as the raw events hold them (µs → ns)
    assert abs(op["time_ns"] - 1000 * sum(r[0] for r in raw)) <= 2000 * STEPS
    assert abs(op["copy_out_ns"] - 1000 * sum(r[1] for r in raw)) <= 2000 * STEPS
    assert abs(op["copy_back_ns"] - 1000 * sum(r[2] for r in raw)) <= 2000 * STEPS
    assert op["copy_out_ns"] > 0 and op["copy_back_ns"] > 0 and op["cpu_ns"] > 0
    assert op["copy_out_ns"] + op["copy_back_ns"] + op["cpu_ns"] == op["time_ns"]
    assert op["per_call_ns"] == op["time_ns"] // op["calls"]
    assert sum(f.details["per_step_ns"].values()) == f.time_lost_ns
    assert sorted(f.details["per_step_ns"]) == list(range(STEPS))


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_fallback_is_found_in_a_plain_torch_profiler_trace(
    plain: dict[str, Run], backend: str
) -> None:
    """No collector: no warning was kept and no device timeline written; the
    ``aten::_to_cpu`` inside the op is the evidence, the profiler's frame the line."""
    run = plain[backend]
    f = _fallback(run.trace)
    if backend == "cpu":
        assert f is None
        return
    assert run.trace.device_tracks().empty
    assert f.title.startswith("CPU fallback: aten::sigmoid at neuron_train.py:"), f.title
    assert f.details["per_op"]["aten::sigmoid"]["calls"] == len(_sigmoid_calls(run.events()))
    assert f.details["per_op"]["aten::sigmoid_backward"]["calls"] == STEPS


@pytest.mark.parametrize("backend", BACKENDS)
def test_host_to_device_copies_carry_bytes_direction_and_line(
    runs: dict[str, Run], backend: str
) -> None:
    t = runs[backend].trace
    s = t.slices
    copies = [t.args(int(i)) for i in s.index[(s["kind"] == "copy").to_numpy()]]
    batch = neuron_train.BATCH * neuron_train.CHANNELS * neuron_train.SIZE**2 * 4
    htod = [a for a in copies if a["copy_kind"] == "HtoD" and a["bytes"] == batch]
    if backend == "cpu":
        assert htod == []
        return
    assert len(htod) == STEPS
    assert {a["source_line"] for a in htod} == {_line_of("HOST-TO-DEVICE")}
    assert {(a["src_device"], a["dst_device"]) for a in htod} == {("cpu", "neuron:0")}


def test_a_backend_that_moves_tensors_its_own_way_is_found_too(tmp: Path) -> None:
    """``neuron_sim`` with ``NEURON_SIM_MOVE=to`` moves each input with ``aten::_to_copy``:
    no ``aten::_to_cpu`` anywhere, so the collector labels nothing from the profiler; the
    op holding a copy, itself on the CPU, and a copy back is the evidence."""
    run = _run(tmp, "vendor", env={"NEURON_SIM_MOVE": "to"})
    events = run.events()
    assert not any(e.get("name") == "aten::_to_cpu" for e in events)
    f = _fallback(run.trace)
    line = _line_of("UNSUPPORTED-OP")
    assert f.title.startswith(f"CPU fallback: aten::sigmoid at neuron_train.py:{line}"), f.title
    assert f.source_lines[0][1] == line
    raw = _sigmoid_calls(events, marker="aten::_to_copy")
    op = f.details["per_op"]["aten::sigmoid"]
    assert op["calls"] == len(raw) == STEPS
    assert abs(op["time_ns"] - 1000 * sum(r[0] for r in raw)) <= 2000 * STEPS
    assert abs(op["copy_out_ns"] - 1000 * sum(r[1] for r in raw)) <= 2000 * STEPS
    assert abs(op["copy_back_ns"] - 1000 * sum(r[2] for r in raw)) <= 2000 * STEPS
    assert op["copy_out_ns"] + op["copy_back_ns"] + op["cpu_ns"] == op["time_ns"]


# -- whose line is it ---------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_no_library_or_explorer_frame_is_shown_as_the_users(
    runs: dict[str, Run], plain: dict[str, Run], backend: str
) -> None:
    """Every line Explorer calls the user's is the script's — not the vendor backend's
    (a site-packages package that the machine reading the trace may not have), not torch's,
    not Explorer's own (its test backend, the collector)."""
    for run in (runs[backend], plain[backend]):
        t = run.trace
        files = set(t.by_source()["file"].astype(str))
        files |= {src[0] for f in t.findings() for src in f.source_lines}
        files |= set(t.critical_path().top_lines["file"].astype(str))
        assert files and {Path(f).name for f in files} == {"neuron_train.py"}, files
        assert not any(is_library_path(f) for f in files)
    names = runs[backend].trace.metadata["explorer"]["library_modules"]
    assert ("neuron_sim" in names) is (backend == "vendor")
    assert "torch" in names and "explorer" not in names
    ops = runs[backend].trace.critical_path().top_ops["name"].astype(str)
    assert not any("explorer/" in n or "neuron_test_backend" in n for n in ops)


def test_the_vendor_backend_is_library_code_where_it_is_not_installed(
    runs: dict[str, Run],
) -> None:
    """Read where ``neuron_sim`` cannot be imported (this process): its frames, which the
    profiler names ``neuron_sim/__init__.py(...)``, are still the library's."""
    with pytest.raises(ImportError):
        __import__("neuron_sim")
    t = runs["vendor"].trace
    frames = {str(n) for n in t.slices["name"].cat.categories if str(n).startswith("neuron_sim/")}
    assert frames  # the tracer did record the backend's frames
    lines = np.unique(t.by_source()["file"].astype(str))
    assert not any("neuron_sim" in f for f in lines)
    assert not any("neuron_sim" in str(f) for f in user_frames(t.data)["file"].cat.categories)
