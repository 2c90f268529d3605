"""Search by substring or regex, with a count and next/previous through the hits."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.errors import UsageError
from explorer.ui.search import SearchBar, search_slices


def test_search_matches_substring_case_insensitively_in_time_order(small_trace) -> None:
    names = small_trace.slices["name"].astype(str)
    ids = search_slices(small_trace, "SGEMM")
    assert set(ids) == set(np.flatnonzero(names.str.contains("sgemm").to_numpy()))
    assert len(ids) == 3
    ts = small_trace.slices["ts"].to_numpy()[ids]
    assert (np.diff(ts) >= 0).all()


def test_regex_search_and_bad_regex(small_trace) -> None:
    ids = search_slices(small_trace, r"^cuda(Launch|Memcpy)", regex=True)
    names = set(small_trace.slices["name"].astype(str).to_numpy()[ids])
    assert names == {"cudaLaunchKernel", "cudaMemcpyAsync"}
    assert len(search_slices(small_trace, "")) == 0
    with pytest.raises(UsageError):
        search_slices(small_trace, "(unclosed", regex=True)


def test_search_bar_counts_and_steps_through_hits(qtbot, small_trace) -> None:
    bar = SearchBar()
    qtbot.addWidget(bar)
    bar.set_trace(small_trace)
    assert bar.search("relu") == 6  # 3 aten::relu + 3 kernels
    assert bar.count.text() == "6 matches"
    seen = []
    bar.current_changed.connect(seen.append)
    for _ in range(7):
        bar.next()
    assert seen[:6] == list(bar.results) and seen[6] == bar.results[0]
    bar.previous()
    assert seen[-1] == bar.results[-1]
    assert bar.count.text() == "6 of 6"
    bar.search("(", regex=True)
    assert bar.count.text() == "bad regex" and len(bar.results) == 0


def test_search_in_the_window_highlights_and_reveals(
    window, open_trace, small_trace_file, qtbot
) -> None:
    trace = open_trace(window, small_trace_file)
    window.search.search("Memcpy HtoD")
    hits = window.search.results
    assert len(hits) == 3
    assert list(window.timeline.highlights) == sorted(hits)
    qtbot.keyClick(window.search.field, "\r")
    first = int(hits[0])
    assert window.timeline.selected == first
    a, b = window.timeline.visible_range()
    ts = int(trace.slices["ts"].iat[first])
    assert a <= ts <= b
    assert "Memcpy HtoD" in window.details.text()
