"""The dependency graph, the viewer's analysis with the most temporaries, takes turns with
the panels' background jobs (:mod:`explorer.ui.one_at_a_time`), on a real window opening
a real trace: no panel job runs while the graph is built."""

from __future__ import annotations

import threading
import time
from typing import Any

import explorer.ui.loader as loader
import explorer.ui.panels as panels
from explorer.ui.app import wait_idle


def test_no_panel_job_runs_while_the_graph_is_built(
    window: Any, open_trace: Any, small_trace_file: Any, monkeypatch: Any
) -> None:
    spans: list[tuple[str, float, float]] = []
    lock = threading.Lock()

    def timed(label: str, work: Any, hold_s: float = 0.0) -> Any:
        def run(*args: Any) -> Any:
            start = time.perf_counter()
            try:
                out = work(*args)
                time.sleep(hold_s)  # long enough for the other to want a turn meanwhile
                return out
            finally:
                with lock:
                    spans.append((label, start, time.perf_counter()))

        return run

    monkeypatch.setattr(
        loader,
        "ANALYSES",
        tuple(
            (name, timed(name, fn, 0.5 if name == "dependency_graph" else 0.0))
            for name, fn in loader.ANALYSES
        ),
    )
    start_job = panels.TracePanel.run_in_background

    def run_in_background(self: Any, work: Any, *args: Any, **kwargs: Any) -> Any:
        job = timed(f"panel {type(self).__name__}", work, 0.3)
        return start_job(self, job, *args, **kwargs)

    monkeypatch.setattr(panels.TracePanel, "run_in_background", run_in_background)
    open_trace(window, small_trace_file)
    wait_idle(window, 60)
    graph = [s for s in spans if s[0] == "dependency_graph"]
    jobs = [s for s in spans if s[0].startswith("panel ")]
    assert len(graph) == 1 and jobs, spans
    _, g0, g1 = graph[0]
    overlapping = [s for s in jobs if s[1] < g1 and g0 < s[2]]
    assert not overlapping, (graph, overlapping)
    assert not window.analysis_errors
