"""``explorer demo`` end to end on this machine's CPU: a real training run, a real trace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from explorer.cli.main import main
from tests.collect.trace_reading import explorer_events, read_trace


def test_demo_trains_writes_a_trace_and_says_how_to_look_at_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")  # never open a window in tests
    out = tmp_path / "demo"
    rc = main(["demo", "--no-view", "--steps", "3", "--out", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0
    traces = list(out.glob("*.pt.trace.json.gz"))
    assert len(traces) == 1 and traces[0].name.startswith("demo_cpu")
    assert f"explorer report {traces[0]}" in printed
    assert f"explorer view {traces[0]}" in printed
    doc = read_trace(traces[0])
    steps = {
        e["name"] for e in doc["traceEvents"] if str(e.get("name")).startswith("ProfilerStep#")
    }
    assert steps == {"ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"}
    script = out / "demo_train.py"
    loss_syncs = [
        e
        for e in explorer_events(doc, "explorer_sync")
        if e["args"]["reason"] == ".item()" and e["args"]["source_file"] == str(script.resolve())
    ]
    lines = script.read_text().splitlines()
    by_line = [lines[e["args"]["source_line"] - 1].strip() for e in loss_syncs]
    # the loss logged every step, attributed to the user's script; the DataLoader's own
    # seeding .item() calls point at the user's `for ... in loader:` line
    assert sum("loss.item()" in text for text in by_line) == 3
    assert all("loss.item()" in text or text.startswith("for ") for text in by_line)


def test_demo_rejects_zero_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--no-view", "--steps", "0", "--out", str(tmp_path)]) == 2
    assert "--steps" in capsys.readouterr().err


def test_demo_never_opens_a_window_offscreen(monkeypatch: pytest.MonkeyPatch) -> None:
    from explorer.ui.app import has_display

    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    assert not has_display()
    monkeypatch.setenv("QT_QPA_PLATFORM", "xcb")
    assert has_display()
    monkeypatch.delenv("DISPLAY")
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert has_display() == (os.sys.platform in ("darwin", "win32"))


def test_demo_on_a_device_this_machine_lacks_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # no machine has a 100th CUDA device; a CPU-only one has none at all
    assert main(["demo", "--no-view", "--device", "cuda:99", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "device 'cuda:99' is not usable here" in err and len(err.strip().splitlines()) == 1


def test_the_planted_slow_loading_is_found_while_other_processes_load_the_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a busy machine the model's compute slows down and a fixed loading cost vanished
    under the report's threshold; with one CPU-burning process per core running alongside,
    the demo's report still finds the input stall at the script's loader line."""
    import subprocess
    import sys

    import explorer
    from explorer.analysis.findings import thresholds

    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 2)
    ]
    try:
        out = tmp_path / "demo"
        rc = main(["demo", "--no-view", "--steps", "3", "--out", str(out)])
    finally:
        for p in burners:
            p.kill()
            p.wait()
    printed = capsys.readouterr().out
    assert rc == 0
    (trace_path,) = out.glob("*.pt.trace.json.gz")
    trace = explorer.load(trace_path)
    stalls = [f for f in trace.findings() if f.kind == "input_stall"]
    assert len(stalls) == 1, printed
    assert stalls[0].share >= thresholds(trace)["input_stall"]
    # The stall's line is the statement that holds the loading time: the "decoding" sleep
    # in the dataset's __getitem__, with the loop that asks for the batch as context —
    # never the `with explorer.collect` line, which torch names main's frame by.
    script = out / "demo_train.py"
    lines = script.read_text().splitlines()
    slow = next(i for i, t in enumerate(lines, 1) if "time.sleep(self.decode_s)" in t)
    loop = next(i for i, t in enumerate(lines, 1) if "for images, labels in loader:" in t)
    collect = next(i for i, t in enumerate(lines, 1) if "with explorer.collect(" in t)
    where = [(n, fn) for f, n, fn in stalls[0].source_lines if f == str(script.resolve())]
    assert where[0] == (slow, "__getitem__"), where
    assert (loop, "main") in where and all(n != collect for n, _ in where), where
    assert "[input_stall]" in printed and "No problem found" not in printed


def test_the_console_scripts_frames_never_open_the_users_timeline(tmp_path: Path) -> None:
    """Run as a user does — the ``explorer`` script pip put next to the interpreter — the
    demo's trace starts at the user's script: no frame of the console script or of
    Explorer's CLI on the timeline, none among the source lines."""
    import subprocess
    import sys

    import explorer
    from explorer.trace.source import is_explorer_file, parse_frame

    script = Path(sys.executable).parent / "explorer"
    assert script.is_file(), "the package is installed with its console script"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "QT_QPA_PLATFORM": "offscreen",
           "EXPLORER_CACHE_DIR": str(tmp_path / "cache")}  # fmt: skip
    out = tmp_path / "demo"
    proc = subprocess.run(
        [str(script), "demo", "--no-view", "--steps", "1", "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    [trace_path] = out.glob("*.pt.trace.json.gz")
    frames = [
        parse_frame(str(e["name"]))
        for e in read_trace(trace_path)["traceEvents"]
        if e.get("cat") == "python_function"
    ]
    files = {f[0] for f in frames if f}
    assert "explorer" not in files and not any(f.startswith("explorer/cli/") for f in files)
    t = explorer.load(trace_path, use_cache=False)
    lines = set(t.by_source()["file"].astype(str))
    assert lines and not any(is_explorer_file(f) for f in lines), lines
    assert {Path(f).name for f in lines} == {"demo_train.py"}
