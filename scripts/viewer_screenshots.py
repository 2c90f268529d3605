"""Screenshots of the viewer in a real X server (Xvfb), as a user sees it: ``explorer view``
launched on the display, the window dumped with ``xwd`` once its analyses are in, saved as
PNG under docs/screenshots/ (issue 29: look at them before calling the viewer done).

    python scripts/viewer_screenshots.py [DEMO_TRACE]

DEMO_TRACE is the trace ``explorer demo`` wrote (its default: explorer-demo/demo_cpu...).
Needs Xvfb, xdotool and xwd (x11-apps); .ci/run installs them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.ui.test_real_window import read_xwd  # noqa: E402  (the one XWD reader)

SHARED = ROOT.parent / "shared" / "traces"
OUT = ROOT / "docs" / "screenshots"
SCREEN = (1600, 1000)


def shots(demo: str | None) -> list[tuple[str, Path, list[str]]]:
    """(name, trace, extra arguments) of each picture."""
    out = []
    if demo:
        out.append(("viewer_demo", Path(demo), ["--finding", "1"]))
    out.append(
        ("viewer_compile", ROOT / "sample_traces" / "cpu_compile_graph_break.pt.trace.json.gz",
         ["--finding", "1"])
    )  # fmt: skip
    for name, file in (
        ("viewer_amd", "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"),
        ("viewer_mtia", "mtia_inference_trace__mtia_inference_rank_0.json.gz"),
    ):
        if (SHARED / file).exists():
            out.append((name, SHARED / file, ["--finding", "1"]))
    out.append(("viewer_job", ROOT / "sample_traces" / "ddp_4rank_slow_input", []))
    return out


def window_of(display: str, proc: subprocess.Popen[bytes], title: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the viewer exited with {proc.returncode}")
        found = subprocess.run(
            ["xdotool", "search", "--name", title],
            env=dict(os.environ, DISPLAY=display),
            capture_output=True,
            text=True,
        ).stdout.split()
        if found:
            return found[0]
        time.sleep(0.3)
    raise SystemExit(f"no window titled {title!r} after {timeout} s")


def main() -> int:
    demo = sys.argv[1] if len(sys.argv) > 1 else None
    number = next(n for n in range(140, 200) if not Path(f"/tmp/.X11-unix/X{n}").exists())
    display = f":{number}"
    server = subprocess.Popen(
        ["Xvfb", display, "-screen", "0", f"{SCREEN[0]}x{SCREEN[1]}x24", "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while not Path(f"/tmp/.X11-unix/X{number}").exists():
            time.sleep(0.05)
        OUT.mkdir(parents=True, exist_ok=True)
        for name, trace, extra in shots(demo):
            env = dict(os.environ, DISPLAY=display, PYTHONPATH=str(ROOT))
            env.pop("QT_QPA_PLATFORM", None)
            env["XDG_CONFIG_HOME"] = f"/tmp/explorer-shots-{number}"
            proc = subprocess.Popen(
                [sys.executable, "-m", "explorer", "view", str(trace), *extra],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                title = trace.name.split(".")[0][:20] if trace.is_file() else ""
                win = window_of(display, proc, title or "Explorer", 120)
                time.sleep(float(os.environ.get("SHOT_WAIT", "25")))  # the analyses
                dump = subprocess.run(
                    ["xwd", "-silent", "-id", win],
                    env=dict(os.environ, DISPLAY=display),
                    capture_output=True,
                    check=True,
                ).stdout
                pixels = read_xwd(dump)
                Image.fromarray(np.ascontiguousarray(pixels)).save(OUT / f"{name}.png")
                print(f"{name}: {OUT / (name + '.png')} {pixels.shape[1]}x{pixels.shape[0]}")
            finally:
                proc.terminate()
                proc.wait(20)
    finally:
        server.terminate()
        server.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
