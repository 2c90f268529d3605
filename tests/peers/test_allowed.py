"""The allow-list stays small and live: each entry names a figure a test compares and traces
that exist, and every trace is run through every peer."""

from __future__ import annotations

from pathlib import Path

from tests.peers.allowed import ALL, ALLOWED
from tests.peers.conftest import peer_trace_paths, trace_id

#: The figures the differential tests look up in the allow-list (test file: figure names).
FIGURES = {
    "test_hta.py": ("hta.temporal", "hta.kernel_types"),
    "test_tb_plugin.py": (
        "tb.operators.recursive_total",
        "tb.operators.negative_self",
        "tb.operators.device_and_self",
        "tb.operators.op_tree_self",
        "tb.dataloader",
        "tb.kernel_vs_communication",
        "tb.steps",
        "tb.communication_wrappers",
    ),
    "test_tracelens.py": ("tracelens.gpu_timeline", "tracelens.ops_summary"),
}


def test_every_entry_names_a_compared_figure_and_real_traces(shared_traces: Path) -> None:
    here = Path(__file__).parent
    for test_file, figures in FIGURES.items():
        text = (here / test_file).read_text()
        for f in figures:
            assert f'"{f}"' in text, f"{test_file} does not look up {f}"
    known = {f for figures in FIGURES.values() for f in figures}
    names = {trace_id(p) for p in peer_trace_paths()}
    for a in ALLOWED:
        assert a.figure in known, f"{a.figure}: no test compares it"
        assert a.reason.strip(), a.figure
        if a.traces != ALL:
            missing = set(a.traces) - names
            assert not missing, f"{a.figure} names traces that are not there: {missing}"


def test_the_allow_list_is_small() -> None:
    # Each entry is a reviewed definitional difference, never an Explorer bug (11-15: the
    # plugin's self time over its own op tree; TraceLens's ops_summary of direct launchers;
    # the plugin's Communication and DataLoader by fixed names; 16-17: HTA's sampled
    # trace_compare pair, whose launches were filtered out inside the capture).
    assert len(ALLOWED) <= 17


def test_every_shared_trace_is_a_differential_case(shared_traces: Path) -> None:
    names = {p.name for p in peer_trace_paths()}
    shared = {
        p.name
        for p in list(shared_traces.iterdir()) + list((shared_traces / "tracelens").iterdir())
        if p.name.endswith((".json", ".json.gz")) and not p.name.endswith("_et.json.gz")
    }
    assert shared and shared <= names
