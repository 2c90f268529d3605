"""Fixtures of the UI tests: offscreen Qt, settings in a temp file, a small trace file.

``small_trace_file`` is a Kineto-format trace written by this fixture (three training steps
of a two-layer model: host ops launching kernels on one GPU stream, a host-to-device copy,
a device synchronise and allocator events). It is built in code so the UI tests run on a
fresh clone; tests on traces captured on real hardware use ``../shared/traces``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
AMD = "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
MTIA = "mtia_inference_trace__mtia_inference_rank_0.json.gz"


def kineto_document(steps: int = 3, synthetic: bool = False) -> dict[str, Any]:
    """A small Kineto trace: per step linear→relu on the host, each launching a kernel,
    one HtoD copy and a synchronise; ac2g flows tie launches to kernels."""
    ev: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "thread_name", "pid": 100, "tid": 1, "args": {"name": "main"}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
    ]
    corr = 1
    t = 1000.0  # µs
    dev_t = 0.0  # the stream runs one kernel at a time
    for step in range(1, steps + 1):
        start = t
        host = []
        dev = []
        for op, dims in (("aten::linear", [[64, 128], [256, 128]]), ("aten::relu", [[64, 256]])):
            host.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": op,
                    "pid": 100,
                    "tid": 1,
                    "ts": t + 5,
                    "dur": 40,
                    "args": {"Input Dims": dims, "External id": corr},
                }
            )
            host.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 100,
                    "tid": 1,
                    "ts": t + 20,
                    "dur": 10,
                    "args": {"correlation": corr, "External id": corr},
                }
            )
            kname = "ampere_sgemm_64x64_nn" if op == "aten::linear" else "vectorized_relu_kernel"
            kdur = 120 if op == "aten::linear" else 30
            dev_t = max(t + 35, dev_t + 2)
            dev.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": kname,
                    "pid": 0,
                    "tid": 7,
                    "ts": dev_t,
                    "dur": kdur,
                    "args": {"correlation": corr, "device": 0, "stream": 7, "External id": corr},
                }
            )
            host.append(
                {
                    "ph": "s",
                    "id": corr,
                    "pid": 100,
                    "tid": 1,
                    "ts": t + 20,
                    "cat": "ac2g",
                    "name": "ac2g",
                }
            )
            dev.append(
                {
                    "ph": "f",
                    "id": corr,
                    "pid": 0,
                    "tid": 7,
                    "ts": dev_t,
                    "cat": "ac2g",
                    "name": "ac2g",
                    "bp": "e",
                }
            )
            dev_t += kdur
            corr += 1
            t += 60
        host.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaMemcpyAsync",
                "pid": 100,
                "tid": 1,
                "ts": t,
                "dur": 15,
                "args": {"correlation": corr},
            }
        )
        dev.append(
            {
                "ph": "X",
                "cat": "gpu_memcpy",
                "name": "Memcpy HtoD (Pageable -> Device)",
                "pid": 0,
                "tid": 7,
                "ts": max(t + 200, dev_t + 2),
                "dur": 50,
                "args": {"correlation": corr, "bytes": 1 << 20, "device": 0, "stream": 7},
            }
        )
        corr += 1
        host.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaDeviceSynchronize",
                "pid": 100,
                "tid": 1,
                "ts": t + 20,
                "dur": 240,
                "args": {"correlation": corr},
            }
        )
        corr += 1
        host.append(
            {
                "ph": "i",
                "s": "t",
                "cat": "cpu_instant_event",
                "name": "[memory]",
                "pid": 100,
                "tid": 1,
                "ts": start + 6,
                "args": {
                    "Device Type": 1,
                    "Device Id": 0,
                    "Addr": 4096 * step,
                    "Bytes": 1 << 20,
                    "Total Allocated": step << 20,
                    "Total Reserved": 4 << 20,
                },
            }
        )
        t += 300
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "pid": 100,
                "tid": 1,
                "ts": start,
                "dur": t - start - 1,
            }
        )
        ev += host + dev
        t += 20
    doc: dict[str, Any] = {
        "schemaVersion": 1,
        "distributedInfo": {"rank": 0, "world_size": 1, "backend": "nccl"},
        "deviceProperties": [{"id": 0, "name": "test GPU"}],
        "traceEvents": ev,
    }
    if synthetic:
        doc["synthetic"] = True
    return doc


@pytest.fixture(autouse=True)
def _no_background_job_outlives_its_test() -> Any:
    """Panels compute in Qt's global thread pool; a job still running when the interpreter
    exits crashes it. Each test waits for its jobs before the next one starts."""
    yield
    from PyQt6.QtCore import QThreadPool

    QThreadPool.globalInstance().waitForDone(30000)


@pytest.fixture(scope="session")
def small_trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("traces") / "small.pt.trace.json"
    path.write_text(json.dumps(kineto_document()))
    return path


@pytest.fixture
def write_trace(tmp_path: Path) -> Any:
    """``write_trace(name, synthetic=False)``: the small trace written under ``tmp_path``."""

    def write(name: str, synthetic: bool = False) -> Path:
        path = tmp_path / name
        path.write_text(json.dumps(kineto_document(synthetic=synthetic)))
        return path

    return write


@pytest.fixture(scope="session")
def small_trace(small_trace_file: Path) -> Any:
    import explorer

    return explorer.load(small_trace_file, use_cache=False)


@pytest.fixture
def settings(tmp_path: Path) -> Any:
    """QSettings in a temp ini file, so tests never touch the user's layout or recents."""
    from PyQt6.QtCore import QSettings

    return QSettings(str(tmp_path / "explorer.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def window(qtbot: Any, settings: Any) -> Any:
    from explorer.ui.main_window import MainWindow

    w = MainWindow(settings=settings, restore=False)
    qtbot.addWidget(w)
    w.resize(1400, 900)
    w.show()
    return w


@pytest.fixture
def open_trace(qtbot: Any) -> Any:
    """``open_trace(window, path)``: open through the background loader, wait for the trace
    and its analyses, return the trace."""

    def run(window: Any, path: Path | str) -> Any:
        window.open_path(str(path))
        qtbot.waitUntil(lambda: window.trace is not None, timeout=30000)
        qtbot.waitUntil(
            lambda: window.analysis is not None and window.analysis.isFinished(), timeout=60000
        )
        qtbot.wait(20)
        return window.trace

    return run


@pytest.fixture
def shared_trace() -> Any:
    """``shared_trace(name)``: a trace from ../shared/traces; skips when the folder is absent."""

    def find(name: str) -> Path:
        path = SHARED / name
        if not path.exists():
            pytest.skip("../shared/traces is absent (it is not part of a user's clone)")
        return path

    return find


def click_graph_node(qtbot: Any, panel: Any, node: int) -> list[int]:
    """Click node ``node`` of a Dependency graph panel where it is drawn; the slice ids
    the panel then asks the timeline to select."""
    from PyQt6.QtCore import Qt

    item = panel.node_items[node]
    panel.view.centerOn(item)
    qtbot.wait(20)
    pos = panel.view.mapFromScene(item.sceneBoundingRect().center())
    with qtbot.waitSignal(panel.slices_selected, timeout=2_000) as blocker:
        qtbot.mouseClick(panel.view.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    return [int(i) for i in blocker.args[0]]
