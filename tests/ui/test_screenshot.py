"""Headless rendering: the screenshot is a real picture of the trace, and the timeline
shows the device rows of traces captured on real accelerators."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PyQt6.QtGui import QImage

from explorer.ui.app import main, open_headless

AMD = "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
MTIA = "mtia_inference_trace__mtia_inference_rank_0.json.gz"
NVIDIA = "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz"


def pixels(path: Path) -> np.ndarray:
    image = QImage(str(path)).convertToFormat(QImage.Format.Format_RGB32)
    ptr = image.constBits()
    ptr.setsize(image.sizeInBytes())
    arr = np.frombuffer(ptr, np.uint8).reshape(image.height(), image.bytesPerLine())
    return arr[:, : image.width() * 4].reshape(image.height(), image.width(), 4)[..., :3].copy()


def timeline_pixels(window, path: Path) -> np.ndarray:
    """The timeline's own pixels, where the slices are drawn."""
    window.timeline.grab().save(str(path))
    return pixels(path)


def test_screenshot_is_not_blank(tmp_path: Path, small_trace_file: Path) -> None:
    out = tmp_path / "window.png"
    assert main(str(small_trace_file), screenshot=str(out)) == 0
    img = pixels(out)
    assert img.shape == (1000, 1600, 3)
    assert img.std() > 20, "the screenshot is (nearly) one colour"
    assert len(np.unique(img.reshape(-1, 3), axis=0)) > 50


@pytest.mark.parametrize("name", [AMD, MTIA, NVIDIA])
def test_real_traces_show_device_rows(name: str, shared_trace, tmp_path: Path) -> None:
    window = open_headless(str(shared_trace(name)), size=(1600, 1000))
    try:
        rows = window.timeline.rows()
        device = [r for r in rows if r.kind == "track" and r.device]
        has_device_tracks = (window.trace.tracks["type"] == "device_stream").any()
        if name == MTIA and not has_device_tracks:
            # MTIA's command processor events sit on host-style threads in this trace.
            assert any(r.kind == "track" for r in rows)
        else:
            collapsed = [
                r
                for r in rows
                if r.kind == "group" and r.device and r.key in window.timeline.layout_.collapsed
            ]
            # A device with many queues (MTIA: 24) is one summary row, its header.
            device = device or collapsed
            assert device, f"no device rows for {name}"
            top = next(r for r in rows if r.kind in ("track", "group"))
            assert top.device, "device streams are listed first"
        img = timeline_pixels(window, tmp_path / "timeline.png")
        assert img.std() > 15
        # The device rows have slices drawn in them, not just background and grid.
        if device:
            background = {(255, 255, 255), (247, 248, 250), (227, 230, 234), (221, 232, 243)}
            colours: set[tuple[int, int, int]] = set()
            for r in device:
                y0 = 48 + r.y - window.timeline.scroll_y
                band = img[max(y0, 48) : y0 + r.height, 240:-20, ::-1]  # BGR → RGB
                colours |= {
                    tuple(int(c) for c in px) for px in np.unique(band.reshape(-1, 3), axis=0)
                }
            assert colours - background, "device rows are empty"
        assert window.results.get("findings") is not None
    finally:
        window.close()


def test_select_zooms_and_fills_details(shared_trace, tmp_path: Path) -> None:
    window = open_headless(str(shared_trace(AMD)), size=(1600, 1000), select="hipLaunchKernel")
    try:
        sid = window.timeline.selected
        assert sid >= 0 and window.trace.slices["name"].iat[sid] == "hipLaunchKernel"
        assert "hipLaunchKernel" in window.details.text()
        a, b = window.timeline.visible_range()
        assert a <= window.trace.slices["ts"].iat[sid] <= b
    finally:
        window.close()
