"""What each slice is, decided once: per-slice boolean columns every analysis reads.

The load-time ``kind`` column (:mod:`explorer.trace.kinds`) says what a slice is from its
category and name alone. The questions analyses ask on top of it — is this host slice a
synchronisation, is it torch.compile at work, the input pipeline, a collective, an
operator? — also depend on the trace as a whole (does it have a device at all: on the CPU
``.item()`` waits for nothing; did Explorer's collector record the syncs itself), on
nesting (everything inside the DataLoader is input) and on launches (a kernel launched by
a collective op is communication). Those rules live here and nowhere else; the breakdown,
the by-source table, the detectors, the critical path and the job analysis read
:func:`classes`, so they cannot disagree about what a slice is.

Every column is a read-only bool array, one entry per slice. Host columns are False on
device slices and vice versa, so a consumer never has to remember which side a rule
applies to.

========================  ==============================================================
column                    True for
========================  ==============================================================
``host_sync``             host slices that block until the device is done: sync runtime
                          calls and the collector's sync events; in device mode also the
                          ops that read a device value (``aten::item``, ``nonzero``...)
                          — where the trace records runtime calls, only those that make
                          one (the others read host tensors) — unless the collector
                          recorded the syncs itself (then those ops are the same waits
                          seen again)
``device_wait``           device slices that only wait (``cuda_sync``, MTIA event_wait)
``compile``               host slices of torch.compile (the collector's compile events,
                          dynamo/inductor frames and spans)
``input_root``            host slices that *are* the input pipeline: ops/annotations named
                          ``enumerate(DataLoader)#...``/``enumerate(DataPipe)#...`` or like
                          data loading, Python frames inside ``torch/utils/data``
``input``                 ``input_root`` slices and everything nested under one
``host_collective``       host ops of a communication library (``c10d::``, ``gloo:``,
                          ``nccl:``...) and host slices that name a collective (DDP's
                          ``_broadcast_coalesced``), in CPU and device traces alike; never
                          an ``aten::`` op (``aten::broadcast_tensors`` only reshapes)
``device_collective``     device collectives: kernels of the NCCL/RCCL/HCCL families by
                          name (kind ``collective``), and kernels whose launching runtime
                          call sits directly in a host collective op
``collective``            either of the two
``blocking_collective``   host collectives that do the communication on the host: in a
                          CPU trace every one; in a device trace those of a host backend
                          (``gloo:``, ``mpi:``, ``ucc:``) and the collectives enclosing
                          them — NCCL's ``c10d::allreduce_`` only enqueues a kernel, its
                          communication is on the device
``dma``                   device "kernels" that move data (MTIA's ``dma_request``)
``span``                  whole-step annotations (``ProfilerStep#N``, ``Iteration Start``)
                          whatever their category: PyTorch 1.9 files ``ProfilerStep#N``
                          under ``Operator``
``operator``              host ops (kind ``cpu_op``) that are not whole-step spans
``autograd``              ops the autograd engine runs for ``backward()``: the
                          ``autograd::engine::evaluate_function: ...`` wrappers, and in
                          traces without them (PyTorch 1.9) the outermost ``*Backward*``
                          and ``AccumulateGrad`` ops
========================  ==============================================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from explorer.analysis.attribution import launcher
from explorer.trace.memo import memoised
from explorer.trace.model import TraceData

#: Host ops that block until the device is done (besides ``kind == "sync"``).
SYNC_OPS = re.compile(r"^aten::(item|_local_scalar_dense|nonzero|is_nonzero)$")
#: The input pipeline: ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``,
#: ``enumerate(DataPipe)#...`` (torchdata's pipes) and user annotations that say they load
#: data.
INPUT_NAMES = re.compile(
    r"DataLoader|data_?loader|DataPipe|input_pipeline|load_batch|next_batch", re.I
)
#: Python frames of the input pipeline: torch's data loading code only (a user function
#: merely *named* ``..._dataloader`` may hold the whole training loop).
INPUT_FRAMES = re.compile(r"torch/utils/data/")
#: Compilation on the host, as dynamo/inductor name it in profiles.
COMPILE_NAMES = re.compile(
    r"_compile\.compile_inner|compile_fx|call_user_compiler|inductor_compile|async_compile"
    r"|dynamo_timed|TorchDynamo(?! Cache Lookup)|aot_autograd",
    re.I,
)
#: Host ops of a communication library: ``c10d::allreduce_``, ``gloo:all_reduce``,
#: ``nccl:broadcast``, the functional collectives, ``record_param_comms``...
HOST_COLLECTIVE = re.compile(
    r"^(_?c10d(_functional)?::|(gloo|nccl|rccl|hccl|mpi|ucc|xccl|oneccl):|ProcessGroup\w*::)"
    r"|^record_param_comms$"
)
#: Collective backends that run the communication on the host's own threads.
HOST_BACKEND = re.compile(r"^(gloo|mpi|ucc):")
#: ...and host slices that name a collective (DDP's ``_broadcast_coalesced``, torchrec's
#: ``## KJTAllToAllSplitsAwaitable wait() ##``), except the ops that only reshape by
#: broadcasting (``aten::broadcast_tensors``, numpy's ``_broadcast_to_dispatcher``):
#: an ``aten::`` op is never a collective.
HOST_COLLECTIVE_WORDS = re.compile(
    r"^(?!aten::).*(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all"
    r"|broadcast(?!_tensors|_to|_shapes|ing))",
    re.I,
)
#: Device work that moves data although the profiler files it as a kernel (MTIA's
#: ``dma_request`` command-processor events).
DMA_NAMES = re.compile(r"^dma|_dma|dma_request", re.I)
#: Whole-step annotations that say nothing about what the host was doing. (The profiler's
#: own whole-trace span sits on a row of its own, which is not host work:
#: :meth:`~explorer.trace.model.TraceData.on_host`.)
SPAN_NAMES = re.compile(r"^ProfilerStep#\d+$|^Iteration Start")
#: The autograd engine's wrapper around each backward node (PyTorch >= 1.10).
ENGINE_OP = re.compile(r"^autograd::engine::evaluate_function")
#: Backward nodes as PyTorch 1.9 names them, with no wrapper around them.
BACKWARD_NODE = re.compile(r"Backward\d*$|^AccumulateGrad$")


@dataclass(frozen=True)
class SliceClasses:
    """The per-slice columns of :func:`classes` (see the module doc), all read-only."""

    device_mode: bool
    host_sync: np.ndarray
    device_wait: np.ndarray
    compile: np.ndarray
    input_root: np.ndarray
    input: np.ndarray
    host_collective: np.ndarray
    device_collective: np.ndarray
    collective: np.ndarray
    blocking_collective: np.ndarray
    dma: np.ndarray
    span: np.ndarray
    operator: np.ndarray
    autograd: np.ndarray


def device_mode(trace: TraceData) -> bool:
    """Whether the trace has device streams: its time is then judged by what the device
    does, and host ops that read device values are syncs."""
    return not trace.device_tracks().empty


@memoised("slice_classes", depends_on=("launcher",))
def classes(trace: TraceData) -> SliceClasses:
    """The classification columns of every slice, computed once per trace."""
    s = trace.slices
    n = len(s)
    kind = trace.kind_in
    host = trace.on_host()
    dev = trace.on_device()
    mode = device_mode(trace)

    sync_kind = kind("sync")
    sync_ops = trace.name_matches(SYNC_OPS) if mode else np.zeros(n, bool)
    runtime = host & kind("runtime", "sync")
    if sync_ops.any() and runtime.any():
        # Where the trace records runtime calls, an .item() that makes none read a host
        # tensor: it waited for nothing (MTIA inference: 75 of them beside 226 real syncs).
        sync_ops &= _ancestors(trace, runtime)
    if np.asarray(s["cat"] == "explorer_sync").any():
        # The collector saw every sync it hooks, with the exact line: count those, not the
        # aten::item/_local_scalar_dense ops inside them (the same waits, seen again).
        sync_ops = np.zeros(n, bool)
    host_sync = host & (sync_kind | sync_ops)

    compile_ = host & (kind("compile") | trace.name_matches(COMPILE_NAMES))

    python = kind("python")
    input_root = host & np.where(
        python, trace.name_matches(INPUT_FRAMES), trace.name_matches(INPUT_NAMES)
    )
    input_ = host & trace.inherit_down(input_root, keep=input_root)

    host_coll = host & (
        kind("collective")
        | trace.name_matches(HOST_COLLECTIVE)
        | trace.name_matches(HOST_COLLECTIVE_WORDS)
    )
    dev_coll = dev & (kind("collective") | _launched_by(trace, host_coll, kind("kernel")))

    span = trace.name_matches(SPAN_NAMES)
    operator = host & kind("cpu_op") & ~span

    engine = trace.name_matches(ENGINE_OP)
    autograd = host & engine
    if not engine.any():
        node = host & kind("cpu_op") & trace.name_matches(BACKWARD_NODE)
        autograd = node & ~_has_parent_in(trace, trace.inherit_down(node, keep=node))

    cols = {
        "host_sync": host_sync,
        "device_wait": dev & sync_kind,
        "compile": compile_,
        "input_root": input_root,
        "input": input_,
        "host_collective": host_coll,
        "device_collective": dev_coll,
        "collective": host_coll | dev_coll,
        "blocking_collective": host_coll
        & (_ancestors(trace, host & trace.name_matches(HOST_BACKEND)) if mode else True),
        "dma": dev & kind("kernel") & trace.name_matches(DMA_NAMES),
        "span": span,
        "operator": operator,
        "autograd": autograd,
    }
    for v in cols.values():
        v.flags.writeable = False
    return SliceClasses(device_mode=mode, **cols)


def _has_parent_in(trace: TraceData, mask: np.ndarray) -> np.ndarray:
    """Per slice: is its parent in ``mask``?"""
    parent = trace.slices["parent"].to_numpy(np.int64)
    out = np.zeros(len(mask), bool)
    has = parent >= 0
    out[has] = mask[parent[has]]
    return out


def _ancestors(trace: TraceData, mask: np.ndarray) -> np.ndarray:
    """``mask`` and every slice enclosing one of its slices: one step per nesting level."""
    out = mask.copy()
    if not out.any():
        return out
    parent = trace.slices["parent"].to_numpy(np.int64)
    depth = trace.slices["depth"].to_numpy(np.int64)
    for level in range(int(depth[out].max()), 0, -1):
        rows = np.flatnonzero(out & (depth == level) & (parent >= 0))
        out[parent[rows]] = True
    return out


def _launched_by(trace: TraceData, ops: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """``candidates`` whose launching runtime call sits directly inside one of ``ops`` (the
    op is the call's parent: a kernel launched by an ``aten::cat`` nested inside a
    collective op is the cat's, not the collective's)."""
    out = np.zeros(len(ops), bool)
    if not ops.any():
        return out
    src = launcher(trace)
    rows = np.flatnonzero(candidates & (src >= 0))
    out[rows] = _has_parent_in(trace, ops)[src[rows]]
    return out
