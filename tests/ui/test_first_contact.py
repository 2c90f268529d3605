"""First contact: a Qt platform that cannot start, the first window's size, ``--finding``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from PyQt6.QtGui import QImage

from explorer.cli.main import main as cli_main
from explorer.ui.main_window import MainWindow, default_window_size
from explorer.ui.qt_platform import debian_package, missing_libraries

ROOT = Path(__file__).resolve().parents[2]
COMPILE_SAMPLE = ROOT / "sample_traces" / "cpu_compile_graph_break.pt.trace.json.gz"


def test_debian_package_names_follow_debians_policy() -> None:
    # Names as Debian/Ubuntu ship them (apt-cache show ... on bookworm / noble).
    assert debian_package("libxcb-cursor.so.0") == "libxcb-cursor0"
    assert debian_package("libxcb-icccm.so.4") == "libxcb-icccm4"
    assert debian_package("libxcb-keysyms.so.1") == "libxcb-keysyms1"
    assert debian_package("libxcb-render-util.so.0") == "libxcb-render-util0"
    assert debian_package("libxkbcommon-x11.so.0") == "libxkbcommon-x11-0"
    assert debian_package("libdbus-1.so.3") == "libdbus-1-3"
    assert debian_package("libEGL.so.1") == "libegl1"
    assert debian_package("libfontconfig.so.1.12.0") == "libfontconfig1"


def test_missing_libraries_reads_ldd_output() -> None:
    ldd = (
        "\tlinux-vdso.so.1 (0x00007ffd)\n"
        "\tlibxcb-icccm.so.4 => not found\n"
        "\tlibQt6Gui.so.6 => /x/libQt6Gui.so.6 (0x00007f)\n"
        "\tlibxcb-keysyms.so.1 => not found\n"
        "\tlibxcb-icccm.so.4 => not found\n"
    )
    assert missing_libraries(ldd) == ["libxcb-icccm.so.4", "libxcb-keysyms.so.1"]


def test_a_display_qt_cannot_reach_is_one_line_and_status_2(small_trace_file: Path) -> None:
    """A real ``explorer view`` process pointed at an X display that does not exist: Qt
    would abort with several lines; Explorer says what is wrong in one line, exits 2."""
    env = dict(os.environ, DISPLAY=":917", PYTHONPATH=str(ROOT))
    env.pop("QT_QPA_PLATFORM", None)
    env.pop("WAYLAND_DISPLAY", None)
    done = subprocess.run(
        [sys.executable, "-m", "explorer", "view", str(small_trace_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("explorer: error: Qt cannot")
    # Either the display is unreachable, or (on a machine without the xcb libraries) the
    # packages to install are named.
    assert ":917" in lines[0] or "apt-get install libxcb" in lines[0]
    assert "Traceback" not in done.stderr and "Aborted" not in done.stderr


def test_the_first_window_fits_the_screen_and_a_resize_is_remembered(qtbot, tmp_path) -> None:
    from PyQt6.QtCore import QSettings

    assert default_window_size(1600, 1000) == (1440, 900)
    assert default_window_size(700, 500) == (700, 500)  # a tiny screen: all of it
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    first = MainWindow(settings=settings, restore=True)
    qtbot.addWidget(first)
    area = first.screen().availableGeometry()
    assert (first.width(), first.height()) == default_window_size(area.width(), area.height())
    first.show()
    # The user narrows it (the offscreen screen is only 800x600, so keep its height).
    chosen = (max(first.minimumSizeHint().width() + 10, first.width() - 60), first.height())
    first.resize(*chosen)
    assert (first.width(), first.height()) == chosen
    first.close()  # saves the geometry
    second = MainWindow(settings=settings, restore=True)
    qtbot.addWidget(second)
    assert (second.width(), second.height()) == chosen


def test_view_finding_opens_on_its_evidence_and_source_line(tmp_path: Path, qtbot) -> None:
    """``explorer view TRACE --finding 1 --screenshot``: the picture is of the finding (its
    evidence in view, its source line shown), and a finding that does not exist is one line."""
    import explorer
    from explorer.ui.app import open_headless, show_finding

    out = tmp_path / "window.png"
    assert cli_main(["view", str(COMPILE_SAMPLE), "--finding", "1", "--screenshot", str(out)]) == 0
    assert (QImage(str(out)).width(), QImage(str(out)).height()) == (1600, 1000)
    assert cli_main(["view", str(COMPILE_SAMPLE), "--finding", "99", "--screenshot", str(out)]) == 2

    trace = explorer.load(COMPILE_SAMPLE)
    finding = trace.findings()[0]
    window = open_headless(str(COMPILE_SAMPLE), finding=1)
    qtbot.addWidget(window)
    ev = np.asarray(finding.evidence)
    ts = trace.slices["ts"].to_numpy()[ev]
    end = ts + trace.slices["dur"].to_numpy()[ev]
    a, b = window.timeline.visible_range()
    assert a <= ts.min() and end.max() <= b
    assert window.timeline.selected == int(ev[np.argmin(ts)])
    assert sorted(window.timeline.evidence.tolist()) == sorted(set(ev.tolist()))
    path, line, _ = finding.source_lines[0]
    assert window.panels["source"].current_line == int(line)
    assert window.findings.table.selectionModel().selectedRows()[0].row() == 0
    assert show_finding(window, 1) is window.findings.findings[0]


def test_demo_without_a_display_says_it_skipped_the_viewer(tmp_path: Path) -> None:
    """``explorer demo`` on a machine without a display (a real run, its own process): it
    says the viewer was not opened and gives a command that makes a picture — which works."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), EXPLORER_CACHE_DIR=str(tmp_path / "cache"))
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        env.pop(name, None)
    out = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "explorer", "demo", "--steps", "2", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(ln for ln in done.stdout.splitlines() if "viewer was not opened" in ln)
    command = line.split("For a picture of it: ", 1)[1].split()
    assert command[:2] == ["explorer", "view"] and command[-2] == "--screenshot"
    shot = subprocess.run(
        [sys.executable, "-m", "explorer", *command[1:]],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert shot.returncode == 0, shot.stderr
    assert "propagateSizeHints" not in shot.stderr + shot.stdout
    assert not QImage(str(tmp_path / command[-1])).isNull()

    # The timeline shows the user's program: its outermost Python frame is the training
    # script's, not Explorer's CLI (explorer/cli/main.py, explorer/__main__.py) or runpy.
    import explorer

    trace = explorer.load(command[2])
    s = trace.slices
    python = s[s["kind"].astype(str) == "python"]
    names = python["name"].astype(str)
    assert not names.str.contains(r"explorer/cli/|explorer/__main__|runpy").any()
    outermost = python.sort_values(["ts", "depth"]).iloc[0]
    assert "demo_train.py" in str(outermost["name"]) and int(outermost["depth"]) == 0


def test_readme_lists_the_packages_explorer_names() -> None:
    from explorer.ui.qt_platform import XCB_PACKAGES

    readme = (ROOT / "README.md").read_text()
    assert "sudo apt-get install " + " ".join(XCB_PACKAGES) in readme


def test_one_command_reproduces_the_readmes_window_png(tmp_path: Path) -> None:
    """scripts/screenshots.py makes docs/screenshots/window.png; the command the README
    gives (explorer view … --finding 1 --screenshot) makes the same picture, pixel for pixel,
    in its own process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), QT_QPA_PLATFORM="offscreen")
    made = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "screenshots.py"), "--out", str(tmp_path / "docs")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert made.returncode == 0, made.stderr[-2000:]
    readme = (ROOT / "README.md").read_text()
    command = next(
        line.strip("`") for line in readme.splitlines() if "--finding 1 --screenshot" in line
    ).split()
    assert command[:2] == ["explorer", "view"]
    done = subprocess.run(
        [sys.executable, "-m", "explorer", *command[1:-1], str(tmp_path / "window.png")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    ours, script = (
        QImage(str(tmp_path / "window.png")),
        QImage(str(tmp_path / "docs" / "window.png")),
    )
    assert not ours.isNull() and ours == script


def test_a_small_window_keeps_most_of_its_width_for_the_timeline(qtbot) -> None:
    """At 900x700 the docks take their share (right column 300 px), not a fixed 460 px
    that left the timeline less than half the window; at 1600x1000 the layout is as before."""
    from explorer.ui.app import open_headless

    small = open_headless(str(COMPILE_SAMPLE), size=(900, 700))
    qtbot.addWidget(small)
    assert small.docks["findings"].width() <= 310
    assert small.timeline.width() >= 0.6 * small.width()
    large = open_headless(str(COMPILE_SAMPLE), size=(1600, 1000))
    qtbot.addWidget(large)
    assert abs(large.docks["findings"].width() - 460) <= 10
