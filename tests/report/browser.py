"""Headless Chromium as a test instrument: load a page, collect what its console says,
find where elements are, take a full-page PNG — over the DevTools protocol on a pipe
(``--remote-debugging-pipe``: NUL-terminated JSON on fds 3 and 4), so no port, no network
and no Python package beyond the standard library.

``python -m tests.report.browser OUTDIR TRACE...`` renders each trace's HTML report and
writes its screenshot to OUTDIR (how ``docs/screenshots/`` is made).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Debian names the binary ``chromium``; other systems ``chromium-browser`` or Chrome.
NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WIDTH = 1280
#: Where charts are, in page coordinates: ``[{kind, x, y, width, height}]``.
_CHARTS_JS = """JSON.stringify([...document.querySelectorAll('svg.chart')].map(e => {
  const r = e.getBoundingClientRect();
  return {kind: e.dataset.chart, x: r.left + scrollX, y: r.top + scrollY,
          width: r.width, height: r.height};
}))"""


def find_chromium() -> str | None:
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class Page:
    """What the browser saw: console errors (messages, uncaught exceptions, failed loads),
    the charts' boxes, and the full-page screenshot (PNG bytes)."""

    errors: list[str] = field(default_factory=list)
    charts: list[dict[str, Any]] = field(default_factory=list)
    png: bytes = b""
    height: int = 0


class _Browser:
    def __init__(self, binary: str, profile: str) -> None:
        # fd 3 (commands in) is our stdin pipe, fd 4 (answers out) our stdout pipe.
        self.proc = subprocess.Popen(
            ["sh", "-c", 'exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>/dev/null', binary,
             "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--no-first-run", "--no-default-browser-check", f"--user-data-dir={profile}",
             "--hide-scrollbars", "about:blank"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.next_id = 0
        self.buffer = b""
        self.events: list[dict[str, Any]] = []

    def _read(self, deadline: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while b"\0" not in self.buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium exited (status {self.proc.poll()})")
            self.buffer += chunk
        msg, _, self.buffer = self.buffer.partition(b"\0")
        out: dict[str, Any] = json.loads(msg)
        return out

    def call(
        self, method: str, session: str | None = None, timeout: float = 60, **params: Any
    ) -> Any:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg).encode() + b"\0")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method for e in self.events):
            self.events.append(self._read(deadline))

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError, BrokenPipeError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _errors(events: list[dict[str, Any]]) -> list[str]:
    out = []
    for e in events:
        method, p = e.get("method"), e.get("params", {})
        if method == "Runtime.exceptionThrown":
            out.append(str(p.get("exceptionDetails", {}).get("text", "exception")))
        elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p["args"]))
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            out.append(str(p["entry"].get("text", "")))
    return out


#: An A4 page's width in CSS pixels (210 mm at 96 dpi).
A4_WIDTH = 794


def load(binary: str, page: Path, width: int = WIDTH, media: str = "screen") -> Page:
    """Open ``page`` in a fresh headless Chromium ``width`` pixels wide and report what it
    saw; ``media="print"`` lays it out with the page's print stylesheet."""
    with tempfile.TemporaryDirectory(prefix="explorer-chromium-") as profile:
        b = _Browser(binary, profile)
        try:
            target = b.call("Target.createTarget", url="about:blank")["targetId"]
            s = b.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                b.call(f"{domain}.enable", s)
            b.call("Emulation.setDeviceMetricsOverride", s, width=width, height=900,
                   deviceScaleFactor=1, mobile=False)  # fmt: skip
            b.call("Emulation.setEmulatedMedia", s, media=media)
            b.call("Page.navigate", s, url=page.resolve().as_uri())
            b.wait_for("Page.loadEventFired")
            height = int(
                b.call("Runtime.evaluate", s, expression="document.documentElement.scrollHeight",
                       returnByValue=True)["result"]["value"]
            )  # fmt: skip
            b.call("Emulation.setDeviceMetricsOverride", s, width=width, height=height,
                   deviceScaleFactor=1, mobile=False)  # fmt: skip
            charts = json.loads(
                b.call("Runtime.evaluate", s, expression=_CHARTS_JS, returnByValue=True)["result"][
                    "value"
                ]
            )
            shot = b.call("Page.captureScreenshot", s, format="png", captureBeyondViewport=True)
            return Page(_errors(b.events), charts, base64.b64decode(shot["data"]), height)
        finally:
            b.close()


def main(argv: list[str]) -> int:
    from explorer.cli.main import main as explorer

    out, traces = Path(argv[0]), argv[1:]
    binary = find_chromium()
    if binary is None:
        print("no chromium on PATH", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    for trace in traces:
        name = Path(trace).name.split(".")[0]
        html = out / f"{name}.html"
        explorer(["report", trace, "--format", "html", "-o", str(html), "--force"])
        page = load(binary, html)
        (out / f"report_{name}.png").write_bytes(page.png)
        html.unlink()
        print(f"{name}: {len(page.charts)} charts, {len(page.errors)} console errors")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
