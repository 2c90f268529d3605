"""A ``neuron`` device for machines without Trainium: a PrivateUse1 backend on the CPU.

The port Explorer is built for — ``.to('cuda')`` becomes ``.to('neuron')``, and TorchNeuron
runs eagerly, sending every operator it does not implement to the CPU with a warning — can
be tried and tested anywhere with this backend. It registers PyTorch's PrivateUse1 dispatch
key under the name ``neuron`` (``torch.utils.backend_registration``), so tensors report
``neuron:0`` and go through the dispatcher exactly as a C++ backend's would:

- a handful of operators are the device's own (:data:`NATIVE_OPS`: matmul, add, relu, a
  convolution and its backward), plus the plumbing every backend has (empty, views, copy);
- every other operator takes the CPU fallback, the way ``at::native::cpu_fallback`` does it:
  a warning in TorchNeuron's words, ``aten::_to_cpu`` on the inputs (the copy out), the CPU
  kernel, and the results copied back in;
- each native kernel and each copy is reported to :mod:`explorer.collect.device_activity`
  with the time it took, so a collected trace has a device timeline (``Neuron 0``).

It is a **test backend**: "device" memory is host memory and every kernel runs on the CPU.
Traces it records say so (``explorer_test_backend`` in their metadata, shown in the report
header and the viewer's banner); nothing presents its timings as Trainium's.

The data of a device tensor lives in a CPU tensor kept per storage: the device tensors
themselves are PyTorch's data-less PrivateUse1 tensors, and autograd may re-wrap them (a
saved output is a new tensor object over the same storage), so the storage, not the Python
object, is the key; a finalizer on the storage drops the data with it.
"""

from __future__ import annotations

import functools
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.library import Library
from torch.utils._pytree import tree_map
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

from explorer.collect import device_activity

NAME = "neuron"

#: What traces recorded with this backend carry at their top level (``explorer_test_backend``).
LABEL = {
    "name": NAME,
    "description": (
        "Explorer's neuron test backend: a PrivateUse1 device implemented in Python that "
        "runs on the CPU. Its timings are CPU timings, not Trainium's."
    ),
}

#: Operators the "device" implements itself — what a small CNN's training step needs, as a
#: real eager backend would cover it; every other operator (``sigmoid``, ``gelu``, pooling,
#: ...) falls back to the CPU. The two convolution entries are PyTorch's hooks for backends.
NATIVE_OPS = (
    "mm",
    "addmm",
    "add.Tensor",
    "add_.Tensor",
    "mul.Tensor",
    "mul_.Tensor",
    "relu",
    "threshold_backward",
    "sum",
    "sum.dim_IntList",
    "fill_.Scalar",
    "zero_",
    "_log_softmax",
    "_log_softmax_backward_data",
    "nll_loss_forward",
    "nll_loss_backward",
    "_foreach_add_.List",
    "_foreach_mul_.Scalar",
    "_local_scalar_dense",
    "convolution_overrideable",
    "convolution_backward_overrideable",
)

#: The backend's warning for an operator it does not implement (TorchNeuron's wording).
FALLBACK_WARNING = "The operator '{op}' is not supported on neuron, falling back to CPU."

_aten = torch.ops.aten
_lock = threading.Lock()
_registered = False
_libraries: list[Library] = []
_data: dict[int, torch.Tensor] = {}


def register() -> None:
    """Make ``neuron`` a device in this process (idempotent).

    PyTorch allows one PrivateUse1 name per process: if another backend already took it,
    this raises ``RuntimeError`` naming it."""
    global _registered
    with _lock:
        if _registered:
            return
        current = torch._C._get_privateuse1_backend_name()
        if current not in ("privateuseone", NAME):
            raise RuntimeError(
                f"the PrivateUse1 device is already named {current!r} in this process; "
                f"the {NAME} test backend needs it"
            )
        if current != NAME:
            _setup_privateuseone_for_python_backend(NAME)
        _install_kernels()
        _registered = True


def registered() -> bool:
    """Whether this process has the test backend (so its traces must say so)."""
    return _registered


def is_test_backend_tensor(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == NAME


# -- the device tensors' data ---------------------------------------------------------------
def _key(t: torch.Tensor) -> int:
    return int(t.untyped_storage()._cdata)


def to_host(t: torch.Tensor) -> torch.Tensor:
    """The CPU tensor holding a device tensor's values (no copy; shares its memory)."""
    return _data[_key(t)]


def _wrap(host: torch.Tensor) -> torch.Tensor:
    """A new device tensor whose values are ``host`` (kept, not copied)."""
    dev = torch._C._acc.create_empty_tensor(tuple(host.shape), host.dtype)
    storage = dev.untyped_storage()
    key = int(storage._cdata)
    _data[key] = host
    weakref.finalize(storage, _data.pop, key, None)
    return dev


def _strided_view(
    t: torch.Tensor, size: Any, stride: Any, storage_offset: int | None
) -> torch.Tensor:
    """``as_strided`` of a device tensor, as a view of its host data.

    A device tensor is contiguous over its own storage (PyTorch's data-less PrivateUse1
    tensors cannot be given strides), so device offsets and strides count the host data's
    elements in row-major order. On contiguous host data they carry over as they are; on a
    strided view (a transpose) each requested element's host position is computed and the
    view is taken when those positions are themselves strided — a transpose of a transpose
    is; anything else is refused rather than silently copied."""
    host = to_host(t)
    offset = t.storage_offset() if storage_offset is None else int(storage_offset)
    if host.is_contiguous():
        return host.as_strided(size, stride, host.storage_offset() + offset)
    extent = host.storage_offset() + sum(
        (n - 1) * st for n, st in zip(host.shape, host.stride(), strict=True)
    )
    memory = torch.arange(int(extent) + 1)
    position = memory.as_strided(host.shape, host.stride(), host.storage_offset()).reshape(-1)
    wanted = position.as_strided(size, stride, offset)
    if wanted.numel() == 0:
        return host.as_strided(size, stride, host.storage_offset())
    base = int(wanted.reshape(-1)[0])
    steps = []
    for d, n in enumerate(wanted.shape):
        steps.append(int(wanted.narrow(d, 1, 1).reshape(-1)[0]) - base if n > 1 else 0)
    if not torch.equal(wanted, memory.as_strided(size, steps, base)):
        raise RuntimeError(
            "the neuron test backend cannot take this strided view of a non-contiguous "
            "tensor; call .contiguous() first"
        )
    return host.as_strided(size, steps, base)


def _host(x: Any) -> Any:
    return to_host(x) if is_test_backend_tensor(x) else x


# -- measured device work -------------------------------------------------------------------
def _device_run(kind: str, name: str, call: str, fn: Callable[[], Any], **args: Any) -> Any:
    t0 = time.time_ns()
    out = fn()
    t1 = time.time_ns()
    device_activity.record(
        device_type=NAME, index=0, kind=kind, name=name, runtime_call=call,
        start_ns=t0, end_ns=t1, args=args or None,
    )  # fmt: skip
    return out


def _kernel(name: str, fn: Callable[[], torch.Tensor]) -> torch.Tensor:
    return _wrap(_device_run("kernel", f"neuron::{name}", "nrtExecute", fn))


def _run_native(name: str, op: Any, *args: Any, **kwargs: Any) -> Any:
    """``op`` on the host data of its device arguments, as one measured kernel. An in-place
    op returns its own (host) argument: that is handed back as the device tensor it is."""
    host_args, host_kwargs = tree_map(_host, (args, kwargs))
    out = _device_run(
        "kernel", f"neuron::{name}", "nrtExecute", lambda: op(*host_args, **host_kwargs)
    )
    device_of: dict[int, torch.Tensor] = {}
    tree_map(lambda d: device_of.setdefault(id(to_host(d)), d) if is_test_backend_tensor(d) else d,
             (args, kwargs))  # fmt: skip

    def back(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        return device_of[id(x)] if id(x) in device_of else _wrap(x)

    return tree_map(back, out)


def _copy(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """``dst.copy_(src)`` across host and device, reported as a copy with its direction."""
    s_dev, d_dev = is_test_backend_tensor(src), is_test_backend_tensor(dst)
    target = to_host(dst) if d_dev else dst
    source = to_host(src) if s_dev else src
    if not s_dev and not d_dev:
        return dst.copy_(src)
    direction = "DtoD" if s_dev and d_dev else ("DtoH" if s_dev else "HtoD")
    kinds = {"DtoD": ("Device", "Device"), "DtoH": ("Device", "Pageable"),
             "HtoD": ("Pageable", "Device")}[direction]  # fmt: skip
    _device_run(
        "gpu_memcpy",
        f"Memcpy {direction} ({kinds[0]} -> {kinds[1]})",
        "nrtMemcpy",
        lambda: target.copy_(source),
        bytes=int(source.nbytes),
    )
    return dst


# -- kernels --------------------------------------------------------------------------------
Registrar = Callable[[str], Callable[[Callable[..., Any]], Callable[..., Any]]]


def _install_kernels() -> None:
    """Register the device's kernels with PyTorch (PrivateUse1), then the CPU fallback for
    every other operator."""
    lib = Library("aten", "IMPL")
    _libraries.append(lib)

    def impl(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register_kernel(fn: Callable[..., Any]) -> Callable[..., Any]:
            lib.impl(name, fn, "PrivateUse1")
            return fn

        return register_kernel

    _install_memory_kernels(impl)
    _install_view_kernels(impl)
    _install_native_kernels(lib)
    _install_convolution_kernels(impl)
    fallback_lib = Library("_", "IMPL")
    _libraries.append(fallback_lib)
    fallback_lib.fallback(_cpu_fallback, "PrivateUse1")


def _install_memory_kernels(impl: Registrar) -> None:
    """Allocation and copies: device tensors are host tensors wrapped."""
    dtype_of = torch.get_default_dtype

    @impl("empty.memory_format")
    def empty(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):  # noqa: ANN001, ANN202
        return _wrap(torch.empty(size, dtype=dtype or dtype_of()))

    @impl("empty_strided")
    def empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):  # noqa: ANN001, ANN202
        return _wrap(torch.empty_strided(size, stride, dtype=dtype or dtype_of()))

    @impl("_copy_from")
    def copy_from(src, dst, non_blocking=False):  # noqa: ANN001, ANN202
        return _copy(src, dst)

    @impl("_copy_from_and_resize")
    def copy_from_and_resize(src, dst):  # noqa: ANN001, ANN202
        (to_host(dst) if is_test_backend_tensor(dst) else dst).resize_(src.shape)
        return _copy(src, dst)


def _install_view_kernels(impl: Registrar) -> None:
    """Views share the device tensor's memory: a view of the host data, wrapped."""

    @impl("view")
    def view(t, size):  # noqa: ANN001, ANN202
        return _wrap(to_host(t).view(size))

    @impl("_unsafe_view")
    def unsafe_view(t, size):  # noqa: ANN001, ANN202
        return _wrap(to_host(t).view(size))

    @impl("as_strided")
    def as_strided(t, size, stride, storage_offset=None):  # noqa: ANN001, ANN202
        return _wrap(_strided_view(t, size, stride, storage_offset))

    @impl("_reshape_alias")
    def reshape_alias(t, size, stride):  # noqa: ANN001, ANN202
        return _wrap(_strided_view(t, size, stride, None))

    # ``detach`` and ``alias`` keep PyTorch's own kernels: a new tensor over the same storage
    # (so the same data) that no Python object owns yet — ``nn.Parameter`` requires that.


def _install_native_kernels(lib: Library) -> None:
    """The device's own operators: the same aten op, run on the host data, measured."""
    for name in NATIVE_OPS:
        if not name.startswith("convolution"):
            base, _, overload = name.partition(".")
            op = getattr(getattr(_aten, base), overload or "default")
            lib.impl(name, functools.partial(_run_native, base, op), "PrivateUse1")


def _install_convolution_kernels(impl: Registrar) -> None:
    """Convolutions, forward and backward, as device kernels."""

    @impl("convolution_overrideable")
    def convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):  # noqa: ANN001, ANN202
        return _kernel(
            "convolution",
            lambda: _aten.convolution.default(
                to_host(x),
                to_host(w),
                _host(bias),
                stride,
                padding,
                dilation,
                transposed,
                output_padding,
                groups,
            ),  # fmt: skip
        )

    @impl("convolution_backward_overrideable")
    def convolution_backward(
        grad, x, w, stride, padding, dilation, transposed, output_padding, groups, output_mask
    ):  # noqa: ANN001, ANN202, E501
        def run() -> Any:
            return _aten.convolution_backward.default(
                to_host(grad), to_host(x), to_host(w), [w.shape[0]], stride, padding, dilation,
                transposed, output_padding, groups, output_mask,
            )  # fmt: skip

        outs = _device_run("kernel", "neuron::convolution_backward", "nrtExecute", run)
        return tuple(_wrap(o) if o is not None else None for o in outs)


def _cpu_fallback(op: Any, *args: Any, **kwargs: Any) -> Any:
    """Run ``op`` on the CPU the way ``at::native::cpu_fallback`` does, with the warning."""
    warnings.warn(FALLBACK_WARNING.format(op=f"aten::{op._schema.name.split('::')[-1]}"),
                  stacklevel=2)  # fmt: skip
    on_device: list[torch.Tensor] = []

    def gather(x: Any) -> Any:
        if is_test_backend_tensor(x):
            on_device.append(x)
        return x

    tree_map(gather, (args, kwargs))
    moved = _aten._to_cpu.default(on_device) if on_device else []  # the copy out
    to_cpu = {id(d): h for d, h in zip(on_device, moved, strict=True)}
    cpu_args, cpu_kwargs = tree_map(lambda x: to_cpu.get(id(x), x), (args, kwargs))
    out = op(*cpu_args, **cpu_kwargs)
    # Arguments the op writes to: copy the CPU result back into the device tensor.
    written: dict[int, torch.Tensor] = {}
    for i, a in enumerate(op._schema.arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        orig: Any = args[i] if i < len(args) else kwargs.get(a.name)
        if is_test_backend_tensor(orig):
            _aten.copy_.default(orig, to_cpu[id(orig)])  # the copy back in
            written[id(to_cpu[id(orig)])] = orig

    def back(x: Any) -> Any:
        if not isinstance(x, torch.Tensor) or x.device.type != "cpu":
            return x
        if id(x) in written:
            return written[id(x)]
        return _aten._to_copy.default(x, device=torch.device(NAME))  # the result copied back in

    return tree_map(back, out)
