"""Explorer against the TensorBoard profiler plugin on every real trace we have.

The plugin's step is a host ``ProfilerStep#N`` widened to the device work launched from it,
starting once the device is done with work launched before it (``_update_steps_duration``),
and it leaves out trailing steps whose device work the profiler did not capture whole: the
same definition as Explorer's step window (and its partial steps). Per step it partitions
the window by priority: Kernel, Memcpy, Memset, Communication, Runtime, DataLoader, CpuOp,
Other, the first role covering an instant winning, as Explorer's breakdown does. So:

* Kernel = Explorer's ``compute`` (kernels on the device, any stream);
* Memcpy + Memset = Explorer's ``dev_copy`` (copies while no kernel runs); Explorer's
  ``data_movement`` also holds the refill after a blocking copy, which is device idle time
  and is not compared here;
* Communication = Explorer's ``communication``;
* DataLoader = Explorer's ``host_input`` (the host in the input pipeline, nothing on the
  device).

The operator table: per op name, calls, host total and self time (total less its child ops
and runtime calls), and the device time of the kernels it launched, children included.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.peers import explorer_figures as ef
from tests.peers.allowed import allowed
from tests.peers.conftest import Cache, trace_id, trace_params
from tests.peers.peers import INPUT_ANNOTATION
from tests.peers.test_hta import close, us


def _steps(trace_path: Path, peers: Cache) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """(the plugin's steps, Explorer's whole steps) of a trace with ProfilerStep annotations."""
    tb = peers.tb_of(trace_path)
    assert not tb.error, tb.error
    if not tb.has_profiler_steps:
        return None
    ours = ef.step_windows(peers.explorer_of(trace_path))
    return pd.DataFrame(tb.steps), ours[~ours["partial"].astype(bool)].reset_index(drop=True)


def _tb_step_params() -> list:
    return [p for p in trace_params() if allowed("tb.steps", trace_id(p.values[0])) is None]


@pytest.mark.parametrize("trace_path", _tb_step_params(), indirect=True)
def test_step_windows(trace_path: Path, peers: Cache) -> None:
    """Same whole steps, each with the same window (1 µs)."""
    got = _steps(trace_path, peers)
    if got is None:
        return
    theirs, ours = got
    assert len(ours) == len(theirs), (
        f"whole steps: Explorer {len(ours)} ({ours['name'].tolist()}) vs the plugin "
        f"{len(theirs)} (ProfilerStep#{theirs['name'].tolist()})"
    )
    bad = []
    for (_, a), (_, b) in zip(ours.iterrows(), theirs.iterrows(), strict=True):
        if abs(a["start"] - b["start"]) > 1000 or abs(a["end"] - b["end"]) > 1000:
            bad.append(
                f"{a['name']}: Explorer [{(a['start'] - b['start']) / 1e3:+.1f}, "
                f"{(a['end'] - b['end']) / 1e3:+.1f}] µs from the plugin's "
                f"{us(b['end'] - b['start'])} window"
            )
    assert not bad, "; ".join(bad)


def _explorer_step_figures(trace_path: Path, peers: Cache) -> pd.DataFrame:
    trace = peers.explorer_of(trace_path)
    wide = ef.step_breakdown(trace)
    labels = ef.device_labels(trace) or ["host"]
    per_step = wide.groupby("step")[["compute", "communication"]].sum()
    if labels == ["host"]:  # CPU training: the plugin's Kernel is device kernels, none here
        per_step["compute"] = 0
    reasons = sum(ef.step_reasons(trace, label).set_index("step") for label in labels)
    per_step["copy"] = reasons.get("dev_copy", 0)
    per_step["input"] = reasons["host_input"]
    return per_step


@pytest.mark.parametrize("trace_path", _tb_step_params(), indirect=True)
def test_step_costs(trace_path: Path, peers: Cache) -> None:
    """Per whole step: Kernel, Memcpy+Memset, Communication and DataLoader time."""
    got = _steps(trace_path, peers)
    if got is None:
        return
    theirs, ours = got
    trace = peers.explorer_of(trace_path)
    assert len(ef.device_labels(trace)) <= 1, "the plugin merges devices; Explorer splits them"
    mine = _explorer_step_figures(trace_path, peers)
    figures = [("Memcpy+Memset", "copy", ("memcpy", "memset"))]
    if allowed("tb.kernel_vs_communication", trace_id(trace_path)) is None:
        figures += [
            ("Kernel", "compute", ("kernel",)),
            ("Communication", "communication", ("communication",)),
        ]
    else:
        mine["kernels"] = mine["compute"] + mine["communication"]
        figures.append(("Kernel+Communication", "kernels", ("kernel", "communication")))
    figures.append(("DataLoader", "input", ("dataloader",)))
    if allowed("tb.dataloader", trace_id(trace_path)):
        # Compared inside the plugin's input spans (enumerate(DataLoader)#...) only.
        mine["input"] = _inside_each_step(trace, ours, mine, "host_input", INPUT_ANNOTATION)
    if allowed("tb.communication_wrappers", trace_id(trace_path)):
        # Compared inside the plugin's collectives (its gloo:*/nccl:* spans) only.
        mine["communication"] = _inside_each_step(
            trace, ours, mine, "host_comm", ef.TB_COLLECTIVE_NAMES
        )
    bad = []
    for i in range(min(len(ours), len(theirs))):
        step = int(ours["step"].iloc[i])
        tb = theirs.iloc[i]
        for label, col, tb_col in figures:
            peer = sum(tb[c] for c in tb_col)
            value = float(mine.loc[step, col])
            if not close(value, peer):
                bad.append(f"step {step} {label}: Explorer {us(value)} vs the plugin {us(peer)}")
    assert not bad, "; ".join(bad[:8]) + (f" (+{len(bad) - 8} more)" if len(bad) > 8 else "")


def _inside_each_step(
    trace, ours: pd.DataFrame, mine: pd.DataFrame, reason: str, names: tuple[str, ...]
) -> list[int]:
    """Per step of ``mine``: ns of the breakdown's ``reason`` inside the slices whose names
    start with one of ``names``, in Explorer's window of the step (0 for a partial step)."""
    windows = ef.step_windows(trace).set_index("step").reindex(mine.index)
    whole = set(ours["step"])
    labels = ef.device_labels(trace) or ["host"]  # as _explorer_step_figures sums them
    return [
        sum(
            ef.reason_inside(
                trace, label, reason, ef.named_spans(trace, names, int(w["start"]), int(w["end"]))
            )
            for label in labels
        )
        if step in whole
        else 0
        for step, w in windows.iterrows()
    ]


def _recursive_names(trace) -> set[str]:
    """Names of ops called (at any depth) inside an op of the same name."""
    s = trace.slices
    names = s["name"].astype(str).to_numpy()
    parent = s["parent"].to_numpy()
    same = np.zeros(len(s), bool)
    anc = parent.copy()
    while (anc >= 0).any():  # one step up the parent chain per pass, all slices at once
        up = anc >= 0
        same[up] |= names[up] == names[anc[up]]
        anc[up] = parent[anc[up]]
    return set(names[same])


@pytest.mark.parametrize("trace_path", trace_params(), indirect=True)
def test_operator_table(trace_path: Path, peers: Cache) -> None:
    """Per host op name: calls, total and self host time, device time (whole trace)."""
    tb = peers.tb_of(trace_path)
    assert not tb.error, tb.error
    trace = peers.explorer_of(trace_path)
    recursive = _recursive_names(trace) if allowed("tb.operators.recursive_total", "*") else set()
    negative_ok = allowed("tb.operators.negative_self", "*") is not None
    unlinked = allowed("tb.operators.device_and_self", trace_id(trace_path)) is not None
    unnested = allowed("tb.operators.op_tree_self", "*") is not None
    ops = ef.operators(trace)
    ops = (
        ops[ops["side"] == "host"]
        .groupby("name")
        .agg(
            count=("count", "sum"),
            total_ns=("total_ns", "sum"),
            self_ns=("self_ns", "sum"),
            device_ns=("device_ns", "sum"),
        )
    )
    if unnested:
        gained = ef.tb_op_tree_self_moves(trace)
        ops["self_ns"] += gained.reindex(ops.index, fill_value=0)
    bad = []
    for name, op in tb.ops.items():
        if name not in ops.index:
            bad.append(f"{name!r}: not an op in Explorer ({op.calls} calls in the plugin)")
            continue
        row = ops.loc[name]
        if int(row["count"]) != op.calls:
            bad.append(f"{name!r} calls: Explorer {int(row['count'])} vs the plugin {op.calls}")
        for label, col, peer in (
            ("total", "total_ns", op.host_ns),
            ("self", "self_ns", op.self_host_ns),
            ("device", "device_ns", op.device_ns),
        ):
            if label != "self" and name in recursive:
                continue
            if label != "total" and unlinked:
                continue
            if label == "self" and peer < 0 and negative_ok:
                continue
            if not close(float(row[col]), peer):
                bad.append(f"{name!r} {label}: Explorer {us(row[col])} vs the plugin {us(peer)}")
    assert not bad, f"{len(bad)} differences: " + "; ".join(bad[:8])
