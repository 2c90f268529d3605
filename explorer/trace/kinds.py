"""From the categories and names in a trace file to Explorer's normalised slice kinds.

Profilers of every era and backend name the same things differently (``cpu_op`` vs
``Operator``, ``cuda_runtime`` vs ``Runtime`` vs ``mtia_runtime`` vs ``privateuse1_runtime``).
Analyses should never care: they read ``slices.kind``. This module is the one place that
knows the spellings.

Explorer's collector writes its own categories (all args optional except where noted):

===================  =======  ==============================================================
category             kind     args
===================  =======  ==============================================================
explorer_copy        copy     bytes, src_device, dst_device, blocking (bool), pinned (bool),
                              copy_kind (HtoD/DtoH/DtoD), source_file, source_line,
                              source_function
explorer_sync        sync     reason (".item()", "synchronize()", ...), source_file, ...
explorer_fallback    fallback op, device, message, source_file, ...
explorer_compile     compile  event ("compile" | "graph_break" | "recompile"), frame, reason,
                              source_file, ...
explorer_system      (counter events, ``ph: "C"``): process/system CPU %, RSS, device util
===================  =======  ==============================================================
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
import pandas as pd

from explorer.trace.columns import category_matches
from explorer.trace.model import KINDS

#: The op PyTorch's generic CPU fallback (``at::native::cpu_fallback``) and Python backends
#: call to move an operator's device inputs to the host: an ``aten::_to_cpu`` nested inside
#: an operator says that operator ran on the CPU, whatever the backend.
FALLBACK_MARKER = "aten::_to_cpu"
#: Ops that are a fallback's own plumbing (moving tensors, allocating, the dispatcher's
#: Python layers around a tensor subclass), never the operator that fell back.
FALLBACK_PLUMBING = frozenset(
    {
        FALLBACK_MARKER,
        "aten::to",
        "PythonSubclass",
        "PythonTLSSnapshot",
        "aten::_to_copy",
        "aten::copy_",
        "aten::empty_strided",
        "aten::empty",
    }
)
#: Host ops that move a fallback's inputs to the host (``_to_cpu``, or ``.to("cpu")``).
FALLBACK_MOVE_OUT = frozenset({FALLBACK_MARKER, "aten::to", "aten::_to_copy"})
#: Host ops that copy a fallback's results back to the device.
FALLBACK_COPY_BACK = frozenset(
    {"aten::copy_", "aten::_to_copy", "aten::to", "aten::_copy_from", "aten::_copy_from_and_resize"}
)

#: category (lower-cased) → kind
CATEGORY_KINDS: dict[str, str] = {
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "python_function": "python",
    "python": "python",
    "user_annotation": "annotation",
    "trace": "annotation",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "runtime": "runtime",
    "hip_runtime": "runtime",
    "mtia_runtime": "runtime",
    "xpu_runtime": "runtime",
    "xpu_driver": "runtime",
    "privateuse1_runtime": "runtime",
    "privateuse1_driver": "runtime",
    "kernel": "kernel",
    "gpu_kernel": "kernel",
    "mtia_ccp_events": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "cuda_sync": "sync",
    "gpu_user_annotation": "device_annotation",
    "cuda_profiler_range": "device_annotation",
    "explorer_copy": "copy",
    "explorer_sync": "sync",
    "explorer_fallback": "fallback",
    "explorer_compile": "compile",
}

#: Host runtime calls that block the host until the device catches up. (A stream or event
#: *query* returns at once, done or not: it is a runtime call, not a wait.)
SYNC_CALL = re.compile(
    r"(cuda|hip|xpu)?(Stream|Device|Event|Context|Ctx)Synchroni[sz]e|^synchronize(Stream|Device|Event)?$"
    r"|^cuStreamSynchronize|^cuCtxSynchronize|^cuEventSynchronize",
    re.IGNORECASE,
)

#: Device kernels that are collectives: the communication libraries' own kernels
#: (``ncclKernel_AllReduce_...``, ``ncclDevKernel_...``, RCCL's, Huawei's HCCL, MSCCL,
#: oneCCL). A kernel whose name merely holds a collective's word is compute:
#: ``type_specialized_broadcast_kernel_launcher`` is an elementwise kernel.
KERNEL_COLLECTIVE = re.compile(r"nccl|rccl|hccl|msccl|oneccl", re.I)

#: MTIA command-processor events that are waits, not compute.
DEVICE_WAIT = re.compile(r"^event_wait$|wait", re.I)

_COPY = re.compile(
    r"Memcpy\s*(HtoD|DtoH|DtoD|PtoP|HtoH|DtoA|AtoD)\s*(?:\((\w+)\s*->\s*(\w+)\))?", re.I
)
_MEM_KINDS = {
    "pageable": "Pageable",
    "pinned": "Pinned",
    "device": "Device",
    "managed": "Managed",
    "host": "Host",
    "array": "Device",
}


#: Categories whose events run on a device (the track they sit on is a device stream).
DEVICE_CATEGORIES: frozenset[str] = frozenset(
    {
        "kernel",
        "gpu_memcpy",
        "gpu_memset",
        "gpu_user_annotation",
        "cuda_sync",
        "mtia_ccp_events",
        "memcpy",
        "memset",
        "cuda_profiler_range",
        "gpu_kernel",
    }
)

#: Flow categories (lower-cased) → flow type; any other category is an ``other`` flow.
FLOW_CATEGORY_TYPES: dict[str, str] = {
    "ac2g": "launch",
    "async_gpu": "launch",
    "async_cpu_to_gpu": "launch",
    "fwdbwd": "fwdbwd",
}

#: torch's ``c10::DeviceType`` numbers, as ``[memory]`` events write them.
DEVICE_TYPES: dict[int, str] = {
    0: "cpu", 1: "cuda", 2: "mkldnn", 3: "opengl", 4: "opencl", 5: "ideep", 6: "hip",
    7: "fpga", 8: "maia", 9: "xla", 10: "vulkan", 11: "metal", 12: "xpu", 13: "mps",
    14: "meta", 15: "hpu", 16: "ve", 17: "lazy", 18: "ipu", 19: "mtia", 20: "privateuse1",
}  # fmt: skip

#: Device processes named for their hardware ("MTIA 17", "Neuron 0") rather than "GPU N".
_DEVICE_PROCESS = re.compile(r"^\s*(MTIA|XPU|HPU|NPU|Neuron|GPU)\b", re.I)


def device_vendor(
    categories: Iterable[str], names: Iterable[str], privateuse1_backend: str = ""
) -> str:
    """The device family a trace's categories and names speak of: ``mtia``, ``xpu``, the
    PrivateUse1 backend's name, ``rocm`` (ROCm's profiler files HIP calls as
    ``cuda_runtime``; the calls say ``hip*``), ``cuda``, else ``gpu``."""
    cats = {str(c).lower() for c in categories}
    if any(c.startswith("mtia") for c in cats):
        return "mtia"
    if any(c.startswith("xpu") for c in cats):
        return "xpu"
    if any(c.startswith("privateuse1") for c in cats):
        return privateuse1_backend or "gpu"
    if "hip_runtime" in cats or any(str(n).startswith("hip") for n in names):
        return "rocm"
    if cats & {"cuda_runtime", "cuda_driver", "runtime", "kernel", "gpu_memcpy"}:
        return "cuda"
    return "gpu"


def process_vendor(process: str, default: str) -> str:
    """The vendor a device process's name gives (``"MTIA 17"`` → ``mtia``), else ``default``."""
    m = _DEVICE_PROCESS.match(process)
    return m.group(1).lower() if m and m.group(1).upper() != "GPU" else default


def device_label(vendor: str, index: int) -> str:
    """What reports call a device: ``cuda:0``, ``mtia:17``; ``cpu`` for host memory."""
    return "cpu" if vendor == "cpu" else f"{vendor}:{max(int(index), 0)}"


def kinds_for(cats: pd.Categorical, names: pd.Categorical) -> pd.Categorical:
    """Kind of every slice (a Categorical over :data:`~explorer.trace.model.KINDS`) from
    its category and name; vectorised over the categories.

    The work is done once per distinct category and once per distinct name, then mapped
    through the codes as small ints, so a million slices cost two small loops and a few
    ``take`` calls, and no per-slice object.
    """
    code = {k: i for i, k in enumerate(KINDS)}
    cat_kind = np.array(
        [code[CATEGORY_KINDS.get(str(c).lower(), "other")] for c in cats.categories]
        + [code["other"]],
        dtype=np.int8,
    )
    kind = cat_kind[cats.codes]  # code -1 (missing) → "other"
    kind[(kind == code["runtime"]) & category_matches(names, SYNC_CALL)] = code["sync"]
    kind[(kind == code["kernel"]) & category_matches(names, KERNEL_COLLECTIVE)] = code["collective"]
    if len(cats):
        mtia = np.asarray(cats == "mtia_ccp_events")
        kind[mtia & category_matches(names, DEVICE_WAIT)] = code["sync"]
    return pd.Categorical.from_codes(kind, categories=list(KINDS))


def parse_copy_names(
    names: pd.Categorical,
) -> tuple[pd.Categorical, pd.Categorical, pd.Categorical]:
    """Direction and memory kinds of memcpy slices, parsed once per distinct name.

    ROCm writes ``(Host -> Device)``, which does not say whether the host memory was pinned:
    that stays ``Host`` rather than being guessed as ``Pageable``.

    ``"Memcpy HtoD (Pageable -> Device)"`` → (``HtoD``, ``Pageable``, ``Device``).
    Names that are not copies give empty strings. Each result's categories are the values
    it holds, sorted.
    """
    cats = names.categories.astype(str)
    d, s, t = [], [], []
    for n in cats:
        m = _COPY.search(n)
        if not m:
            d.append("")
            s.append("")
            t.append("")
            continue
        direction = m.group(1)
        direction = direction[0].upper() + "to" + direction[-1].upper()
        d.append(direction)
        s.append(_MEM_KINDS.get((m.group(2) or "").lower(), ""))
        t.append(_MEM_KINDS.get((m.group(3) or "").lower(), ""))
    codes = np.asarray(names.codes)
    present = np.zeros(len(cats) + 1, bool)
    present[codes] = True  # code -1 (missing) marks the last entry: ""
    return (
        _per_category(d, codes, present),
        _per_category(s, codes, present),
        _per_category(t, codes, present),
    )


def _per_category(table: list[str], codes: np.ndarray, present: np.ndarray) -> pd.Categorical:
    """``table[code]`` for every code (``""`` for -1) as a Categorical over the values
    that occur."""
    values = np.array([*table, ""], dtype=object)
    uniq = sorted(set(values[present].tolist()))
    position = {v: i for i, v in enumerate(uniq)}
    value_code = np.array([position.get(v, 0) for v in values], np.int16)
    return pd.Categorical.from_codes(value_code[codes], categories=uniq)
