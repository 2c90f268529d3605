"""The peers' own answers for one trace, read through each peer's public analysis code.

* Holistic Trace Analysis (HTA, ``holistictraceanalysis``): ``TraceAnalysis`` with
  ``include_last_profiler_step=True`` (every profiled step; by default HTA drops the last),
  its temporal breakdown and kernel-type breakdown, and the GPU events it kept (their
  window is the one the temporal breakdown is over).
* The TensorBoard profiler plugin (``torch-tb-profiler``): the plugin's own event parser, step
  windows, per-step cost partition (Kernel, Memcpy, Memset, Communication, Runtime,
  DataLoader, CpuOp, Other) and operator table, exactly as its Overview and Operator pages
  compute them.
* TraceLens: its published reports (CSV files next to the traces in
  ``../shared/traces/tracelens/``); TraceLens itself is not installed.

Each peer runs once per trace per test session (the callers cache the results). Shims keep
the peers answering their own question on these traces without changing how they compute
it. The plugin predates today's Kineto: it is given runtime calls under their old category
``Runtime`` and ``enumerate(DataLoader)#...`` as the operator it was (else it links no
kernel to an op or a step and sees no input time), and the trace without the profiler's
device-row copies of ``ProfilerStep#N`` (``gpu_user_annotation``), which it would take for
extra host steps. For HTA:
HTA's parser downcasts a small trace's ``correlation`` column to int8/int16 and then assigns
row indices that do not fit (pandas 3 raises there instead of upcasting), so the column is
widened first; and HTA's ns-rounding (ceil start, floor end: each slice loses up to 2 µs) is
turned off with its own switch, so both tools measure the same intervals.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import logging
import os
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

US = 1000  # ns per µs


@dataclass
class HtaResult:
    """HTA's figures for one trace, in ns; ``error`` is set (and nothing else) when HTA cannot
    read the trace or has no GPU events to break down."""

    error: str = ""
    window: tuple[int, int] = (0, 0)  # absolute ns: first kept GPU event start, last end
    idle_ns: float = 0.0
    compute_ns: float = 0.0
    non_compute_ns: float = 0.0
    kernel_time_ns: float = 0.0
    #: kernel type (COMPUTATION, COMMUNICATION, MEMORY, OTHER) -> summed duration, ns
    kernel_type_ns: dict[str, float] = field(default_factory=dict)
    #: the GPU events HTA kept: absolute start ns, duration ns, kernel type
    events: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: profiler steps HTA found (its iteration numbers)
    iterations: list[int] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)


def _hta_shims() -> None:
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    import hta.common.trace as hta_trace

    original = hta_trace.transform_correlation_to_index
    if getattr(original, "_explorer_shim", False):
        return

    def widened(df: pd.DataFrame, symbol_table: object) -> pd.DataFrame:
        if "correlation" in df.columns:
            df["correlation"] = df["correlation"].astype(np.int64)
        return original(df, symbol_table)

    widened._explorer_shim = True  # type: ignore[attr-defined]
    hta_trace.transform_correlation_to_index = widened


@contextlib.contextmanager
def _quiet():
    """The peers log every step at WARNING and print progress: keep test output readable."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    for name in ("hta", "torch_tb_profiler"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        root.setLevel(level)


def hta_analysis(files: dict[int, str], trace_dir: str) -> object:
    """HTA's ``TraceAnalysis`` over ``files`` (rank -> path), or over every trace in
    ``trace_dir`` when ``files`` is empty (HTA then finds each file's rank itself)."""
    _hta_shims()
    from hta.trace_analysis import TraceAnalysis

    with _quiet():
        return TraceAnalysis(
            trace_files=files or None, trace_dir=trace_dir, include_last_profiler_step=True
        )


def run_hta(path: Path) -> HtaResult:
    from hta.utils.utils import get_kernel_type

    try:
        ta = hta_analysis({0: str(path)}, str(path.parent))
    except Exception as e:  # noqa: BLE001 - a peer failing is a result to report
        return HtaResult(error=f"HTA cannot parse it: {type(e).__name__}: {str(e)[:160]}")
    t = ta.t
    df = t.traces[0]
    sym = t.symbol_table.get_sym_table()
    gpu = df[df["stream"].ne(-1)]
    out = HtaResult(ranks=sorted(t.traces), iterations=[int(i) for i in t.get_iterations(0)])
    if gpu.empty:
        out.error = "HTA keeps no GPU event in it (nothing for its temporal breakdown)"
        return out
    with _quiet():
        tb = ta.get_temporal_breakdown(visualize=False).iloc[0]
    out.idle_ns = float(tb["idle_time(us)"]) * US
    out.compute_ns = float(tb["compute_time(us)"]) * US
    out.non_compute_ns = float(tb["non_compute_time(us)"]) * US
    out.kernel_time_ns = float(tb["kernel_time(us)"]) * US
    # HTA's times are µs after subtracting the first one (``min_ts``); to ns in two parts, so
    # that an epoch-µs ``min_ts`` (1.6e15) is not rounded in float64 after x1000
    whole = int(np.floor(float(t.min_ts)))
    base_ns = whole * US + round((float(t.min_ts) - whole) * US)
    ts = np.round(gpu["ts"].to_numpy(np.float64) * US).astype(np.int64) + base_ns
    dur = np.round(gpu["dur"].to_numpy(np.float64) * US).astype(np.int64)
    names = [sym[int(n)] for n in gpu["name"].to_numpy()]
    out.events = pd.DataFrame(
        {"ts": ts, "dur": dur, "name": names, "type": [get_kernel_type(n) for n in names]}
    )
    out.window = (int(out.events["ts"].min()), int((out.events["ts"] + out.events["dur"]).max()))
    out.kernel_type_ns = {k: float(v) for k, v in out.events.groupby("type")["dur"].sum().items()}
    return out


@dataclass
class TbOp:
    calls: int
    host_ns: float
    self_host_ns: float
    device_ns: float


@dataclass
class TbResult:
    """The TensorBoard plugin's figures for one trace (ns); ``error`` when it cannot read it."""

    error: str = ""
    #: per step, in time order: name, absolute window [start, end) ns, and the cost partition
    steps: list[dict[str, float | str]] = field(default_factory=list)
    ops: dict[str, TbOp] = field(default_factory=dict)
    has_profiler_steps: bool = False
    devices: list[int] = field(default_factory=list)


def _device_step_copy(event: dict) -> bool:
    """The profiler's copy of a ``ProfilerStep#N`` on a device row (``gpu_user_annotation``):
    the plugin takes it for one more host step (two ``ProfilerStep#6`` of which one spans the
    device's busy time), and chains the real steps' windows through it."""
    return event.get("cat") == "gpu_user_annotation" and str(event.get("name", "")).startswith(
        "ProfilerStep#"
    )


#: Runtime-call categories of today's Kineto; the plugin (0.4.3, its last release) knows the
#: family by its older name ``Runtime`` only.
RUNTIME_CATEGORIES = frozenset(
    {"cuda_runtime", "cuda_driver", "hip_runtime", "mtia_runtime", "privateuse1_runtime"}
)
INPUT_ANNOTATION = ("enumerate(DataLoader)#", "enumerate(DataPipe)#")


def _old_category(event: dict) -> dict:
    """The event under the category the plugin was written for. Kineto renamed ``Runtime``
    to ``cuda_runtime`` (and added ``cuda_driver``...), and PyTorch now records
    ``enumerate(DataLoader)#...`` as a ``user_annotation`` where it was an operator: the
    plugin ignores both (so it links no kernel to its launching op or step, and sees no
    input time) unless they carry the category it knows."""
    cat = event.get("cat")
    if cat in RUNTIME_CATEGORIES:
        return {**event, "cat": "Runtime"}
    if cat == "user_annotation" and str(event.get("name", "")).startswith(INPUT_ANNOTATION):
        return {**event, "cat": "cpu_op"}
    return event


def run_tb(path: Path) -> TbResult:
    from torch_tb_profiler.profiler.data import RunProfileData
    from torch_tb_profiler.profiler.event_parser import EventParser, ProfileRole
    from torch_tb_profiler.profiler.op_agg import ModuleAggregator
    from torch_tb_profiler.profiler.overall_parser import OverallParser

    try:
        with _quiet():
            _, doc = RunProfileData._preprocess_file(str(path), tempfile.gettempdir())
            doc["traceEvents"] = [
                _old_category(e) for e in doc["traceEvents"] if not _device_step_copy(e)
            ]
            data = RunProfileData("worker", "span", doc)
            parser = EventParser()
            tid2tree, _ = parser.parse(data.events, data.forward_backward_events)
            agg = ModuleAggregator()
            agg.aggregate(tid2tree)
            overall = OverallParser()
            overall.aggregate(parser.steps, parser.role_ranges)
    except Exception as e:  # noqa: BLE001 - a peer failing is a result to report
        return TbResult(error=f"the plugin cannot parse it: {type(e).__name__}: {str(e)[:160]}")
    out = TbResult(
        has_profiler_steps=any(
            str(e.get("name", "")).startswith("ProfilerStep#") for e in doc["traceEvents"]
        ),
        devices=sorted(int(d) for d in parser.used_devices),
    )
    for name, (start, end), costs in zip(
        parser.steps_names, parser.steps, overall.steps_costs, strict=True
    ):
        c = costs.costs
        out.steps.append(
            {
                "name": name,
                "start": start * US,
                "end": end * US,
                "kernel": c[ProfileRole.Kernel] * US,
                "memcpy": c[ProfileRole.Memcpy] * US,
                "memset": c[ProfileRole.Memset] * US,
                "communication": c[ProfileRole.Communication] * US,
                "runtime": c[ProfileRole.Runtime] * US,
                "dataloader": c[ProfileRole.DataLoader] * US,
                "cpu_op": c[ProfileRole.CpuOp] * US,
                "other": c[ProfileRole.Other] * US,
            }
        )
    for op in agg.op_list_groupby_name:
        out.ops[op.name] = TbOp(
            calls=int(op.calls),
            host_ns=float(op.host_duration) * US,
            self_host_ns=float(op.self_host_duration) * US,
            device_ns=float(op.device_duration) * US,
        )
    return out


@dataclass
class TraceLensReport:
    """TraceLens's published report for one trace (µs as TraceLens writes them)."""

    timeline_ms: dict[str, float]
    kernels: pd.DataFrame
    ops: pd.DataFrame | None


def tracelens_report(trace: Path) -> TraceLensReport | None:
    """The CSV files TraceLens wrote for ``trace`` (``X.json.gz`` -> ``X.gpu_timeline.csv``...),
    or None when it has none."""
    stem = trace.name.removesuffix(".json.gz")
    base = trace.parent / stem
    timeline = base.with_name(stem + ".gpu_timeline.csv")
    if not timeline.is_file():
        return None
    tl = pd.read_csv(timeline)
    ops = base.with_name(stem + ".ops_summary.csv")
    return TraceLensReport(
        timeline_ms=dict(zip(tl["type"], tl["time ms"].astype(float), strict=True)),
        kernels=pd.read_csv(base.with_name(stem + ".kernel_summary.csv")),
        ops=pd.read_csv(ops) if ops.is_file() else None,
    )


def raw_events(path: Path) -> list[dict]:
    """The trace file's events as JSON (for the few checks that need what a peer saw)."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw)
    return doc["traceEvents"] if isinstance(doc, dict) else doc
