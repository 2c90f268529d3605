"""Selecting an event shows what it is, its args, its source line and what it relates to."""

from __future__ import annotations

import numpy as np
from PyQt6.QtCore import Qt, QUrl

from explorer.ui.details import DetailsPanel, related_events

AMD = "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"


def test_related_events_follow_launch_flows(small_trace) -> None:
    rel = related_events(small_trace, 2)  # the first cudaLaunchKernel
    assert (2, 21, "launch") in rel
    assert (2, 21, "launch") in related_events(small_trace, 21)


def test_details_show_name_kind_times_args_and_related(qtbot, small_trace) -> None:
    panel = DetailsPanel()
    qtbot.addWidget(panel)
    panel.set_trace(small_trace)
    panel.on_selection(1)  # aten::linear with Input Dims
    text = panel.text()
    assert "aten::linear" in text
    assert "cpu_op" in text
    assert "40.0 µs" in text  # duration
    assert "Input Dims" in text and "[64, 128]" in text
    assert "ProfilerStep#1" in text  # the parent
    panel.on_selection(21)
    text = panel.text()
    assert "ampere_sgemm_64x64_nn" in text and "120 µs" in text
    assert "launch ← cudaLaunchKernel" in text
    with qtbot.waitSignal(panel.slice_requested) as sig:
        panel._link(QUrl("slice:2"))
    assert sig.args == [2]
    panel.on_selection(-1)
    assert "Click an event" in panel.text()


def test_window_selection_fills_details_and_draws_arrows(
    window, open_trace, small_trace_file
) -> None:
    open_trace(window, small_trace_file)
    window.reveal(2)
    assert window.timeline.selected == 2
    assert "cudaLaunchKernel" in window.details.text()
    assert (2, 21) in window.timeline.related
    # Following the related link selects the kernel on the timeline.
    window.details._link(QUrl("slice:21"))
    assert window.timeline.selected == 21
    assert "ampere_sgemm" in window.details.text()


def test_details_on_a_real_amd_trace(window, open_trace, shared_trace) -> None:
    trace = open_trace(window, shared_trace(AMD))
    names = trace.slices["name"].astype(str)
    sid = int(names[names == "hipLaunchKernel"].index[0])
    window.reveal(sid)
    text = window.details.text()
    assert "hipLaunchKernel" in text and "runtime" in text and "correlation" in text
    # The launch points at its kernel on the GPU stream.
    kernel = [b for a, b, rel in window.details.related if a == sid and rel == "launch"]
    assert kernel and trace.slices["kind"].iat[kernel[0]] in ("kernel", "memcpy", "memset")


def test_a_kernel_shows_the_user_line_that_launched_it(window, open_trace, tmp_path) -> None:
    """Device ops have no Python stack; Details shows the line of the host code that
    launched them (via the launch flow), once the background analyses filled it in.
    The trace is a scenario of explorer.scenarios (synthetic)."""
    from explorer import scenarios

    trace = open_trace(window, scenarios.write("sync_storm", tmp_path / "sync_storm.json"))
    assert trace.synthetic
    kinds = trace.slices["kind"].astype(str).to_numpy()
    kernel = int(np.flatnonzero(kinds == "kernel")[0])
    launch = [a for a, b, rel in related_events(trace, kernel) if b == kernel and rel == "launch"]
    assert launch, "the kernel has a launch flow"
    from explorer.analysis.attribution import slice_sources

    expected = slice_sources(trace).iloc[kernel]
    assert expected["file"], "the scenario records Python stacks"
    window.reveal(kernel)
    text = window.details.text()
    assert f"{expected['file']}:{int(expected['line'])}" in text


def test_dependency_neighbours_are_related_without_nesting(shared_trace) -> None:
    """On a real trace with cudaEventSynchronize between streams, the dependency graph's
    sync edges show up as related events; nesting edges (the parent) do not."""
    import explorer

    trace = explorer.load(shared_trace("critical_path__cuda_event_sync__event_sync_trace.json.gz"))
    graph = trace.dependency_graph()
    sync = graph.edges[graph.edges["type"].astype(str) == "sync"]
    assert len(sync)
    src, dst = int(sync["src"].iat[0]), int(sync["dst"].iat[0])
    rel = related_events(trace, dst, graph)
    assert (src, dst, "depends (sync)") in rel
    assert not any(r.endswith("(nest)") for _, _, r in rel)


def test_a_long_kernel_name_is_elided_with_the_full_name_on_hover(
    window, open_trace, shared_trace, qtbot
) -> None:
    """A real NVIDIA trace's longest kernel name (a templated C++ name): the Details title
    is one line that ends in an ellipsis inside the pane, the whole name is its tooltip, and
    the pane does not grow wider than its dock."""
    trace = open_trace(
        window,
        shared_trace("critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz"),
    )
    names = trace.slices["name"].astype(str)
    longest = int(names.str.len().idxmax())
    full = names.iat[longest]
    assert len(full) > 150
    width_before = window.docks["details"].width()
    window.reveal(longest)
    details = window.details
    assert details.title.toolTip() == full
    shown = details.title.text()
    assert shown.endswith("…") and full.startswith(shown[:-1])
    assert details.title.fontMetrics().horizontalAdvance(shown) <= details.width()
    assert window.docks["details"].width() == width_before
    assert full in details.text()
    # Narrower pane, shorter title: it follows resizes.
    window.resizeDocks([window.docks["details"]], [260], Qt.Orientation.Horizontal)
    qtbot.waitUntil(lambda: len(details.title.text()) < len(shown), timeout=3000)


def test_details_say_a_device_op_was_launched_before_the_capture(qtbot, shared_trace) -> None:
    """The real trace_compare capture begins mid-iteration: its first kernel's launch is not
    in the trace, and the panel says it belongs to no step; a launched kernel does not."""
    import explorer
    from explorer.analysis.attribution import launcher

    trace = explorer.load(shared_trace("trace_compare__base__base.json.gz")).data
    launcher(trace)  # the analyses have run (the panel does not compute them on a click)
    panel = DetailsPanel()
    qtbot.addWidget(panel)
    panel.set_trace(trace)
    kind = trace.slices["kind"].astype(str).to_numpy()
    kernels = np.flatnonzero(kind == "kernel")
    panel.on_selection(int(kernels[0]))
    assert "launched before the capture" in panel.text()
    launched = kernels[launcher(trace)[kernels] >= 0]
    panel.on_selection(int(launched[0]))
    assert "launched before the capture" not in panel.text()
