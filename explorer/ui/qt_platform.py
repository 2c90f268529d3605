"""Can Qt open a window here? Checked before the first window, answered in one line.

Qt aborts the process with a multi-line message when its platform plugin cannot start
(on a fresh Debian/Ubuntu machine the ``xcb`` plugin needs system libraries the PyQt6
wheel does not ship, such as ``libxcb-cursor0``). :func:`check_window_platform` starts Qt
in a child process first; when that fails it reads which shared libraries the plugin
misses (``ldd``) and raises a :class:`~explorer.errors.UsageError` naming the Debian
packages to install, so ``explorer view`` exits 2 with one line instead.

:func:`quiet_qt_messages` drops Qt's chatter that means nothing to a user (the offscreen
plugin's ``propagateSizeHints()`` notice) and passes every other message on to stderr.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from explorer.errors import UsageError

#: The packages Qt's xcb plugin needs on Debian/Ubuntu beyond a desktop's usual set; the
#: README lists the same line.
XCB_PACKAGES = (
    "libxcb-cursor0",
    "libxcb-icccm4",
    "libxcb-keysyms1",
    "libxcb-image0",
    "libxcb-render-util0",
    "libxcb-xkb1",
    "libxkbcommon-x11-0",
    "libegl1",
    "libfontconfig1",
    "libdbus-1-3",
)
#: Qt messages that are noise to a user, dropped by :func:`quiet_qt_messages`.
QUIET_MESSAGES = ("does not support propagateSizeHints",)

_PROBE = (
    "import sys\n"
    "from PyQt6.QtGui import QGuiApplication\n"
    "app = QGuiApplication(sys.argv[:1])\n"
    "print(app.platformName())\n"
)


def has_display() -> bool:
    """Whether a window can be shown (an X or Wayland display, or a non-Linux desktop)."""
    if os.environ.get("QT_QPA_PLATFORM", "").lower() in ("offscreen", "minimal"):
        return False
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


def debian_package(soname: str) -> str:
    """The Debian/Ubuntu package that ships a shared library, by Debian's naming policy:
    ``libxcb-cursor.so.0`` → ``libxcb-cursor0``, ``libxkbcommon-x11.so.0`` →
    ``libxkbcommon-x11-0``, ``libEGL.so.1`` → ``libegl1``."""
    m = re.fullmatch(r"(.+?)\.so\.(\d+)(?:\.[\d.]+)?", soname.strip())
    if not m:
        return soname
    name, version = m.group(1).lower(), m.group(2)
    return f"{name}-{version}" if name[-1].isdigit() else f"{name}{version}"


def missing_libraries(ldd_output: str) -> list[str]:
    """The ``not found`` libraries of ``ldd``'s output, each once, in order."""
    found = re.findall(r"^\s*(\S+)\s+=>\s+not found", ldd_output, flags=re.MULTILINE)
    return list(dict.fromkeys(found))


def xcb_plugin() -> Path:
    """The xcb platform plugin of the installed PyQt6."""
    from PyQt6.QtCore import QLibraryInfo

    plugins = Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath))
    return plugins / "platforms" / "libqxcb.so"


def missing_packages() -> list[str]:
    """Debian packages whose libraries Qt's xcb plugin cannot find on this machine."""
    plugin = xcb_plugin()
    if not plugin.exists():
        return []
    result = subprocess.run(
        ["ldd", str(plugin)], capture_output=True, text=True, check=False, timeout=30
    )
    return [debian_package(lib) for lib in missing_libraries(result.stdout)]


def check_window_platform(timeout_s: float = 30.0) -> None:
    """Raise :class:`UsageError` (one line) when Qt cannot open a window here."""
    env = dict(os.environ)
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=timeout_s,
    )
    if probe.returncode == 0:
        return
    platform = os.environ.get("QT_QPA_PLATFORM") or ("xcb" if os.environ.get("DISPLAY") else "")
    packages = missing_packages() if sys.platform.startswith("linux") else []
    if packages:
        raise UsageError(
            f"Qt cannot start its '{platform or 'default'}' window platform: system libraries "
            f"are missing; install them with 'sudo apt-get install {' '.join(packages)}' "
            "(Debian/Ubuntu), or save a picture with 'explorer view TRACE --screenshot out.png'"
        )
    lines = [ln.strip() for ln in probe.stderr.splitlines() if ln.strip()]
    reason = next((ln for ln in lines if "connect to display" in ln), lines[0] if lines else "")
    reason = reason or f"Qt exited with status {probe.returncode}"
    display = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or "?"
    raise UsageError(
        f"Qt cannot open a window on display {display} ({reason}); check DISPLAY, or save a "
        "picture with 'explorer view TRACE --screenshot out.png'"
    )


def quiet_qt_messages() -> None:
    """Route Qt's messages to stderr, without the ones in :data:`QUIET_MESSAGES`."""
    from PyQt6.QtCore import QMessageLogContext, QtMsgType, qInstallMessageHandler

    def handler(kind: QtMsgType, context: QMessageLogContext, message: str | None) -> None:
        text = message or ""
        if any(q in text for q in QUIET_MESSAGES):
            return
        sys.stderr.write(text + "\n")

    qInstallMessageHandler(handler)
