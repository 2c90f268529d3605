"""neuron_sim: a Neuron-like eager device for PyTorch, written the way a vendor ships one.

This package knows nothing of Explorer (it must not import it): it is what a third party's
Python PrivateUse1 backend looks like from the outside, so that Explorer can be tested on a
backend it has never seen. It is installed into a ``site-packages`` directory by the tests.

- ``import neuron_sim`` renames PyTorch's PrivateUse1 backend to ``neuron``, registers the
  ``torch.neuron`` device module, a device guard and the backend hooks, and generates the
  ``Tensor.neuron()`` / ``Module.neuron()`` methods;
- a device tensor is a :class:`NeuronTensor`, a ``__torch_dispatch__`` wrapper subclass
  (device ``neuron:0``) around a CPU tensor holding its values;
- the operators in :data:`SUPPORTED` run "natively" (on the wrapped data);
- every other operator falls back to the CPU: a warning the first time each operator is
  seen (``NEURON_SIM_WARN_ALWAYS=1`` warns every call), ``aten::_to_cpu`` on the device
  inputs (``NEURON_SIM_MOVE=to``: ``aten::_to_copy`` to the CPU, one tensor at a time,
  as a backend without ``_to_cpu`` would), the CPU kernel, and each result copied back to the device by ``aten::copy_``
  into a freshly allocated device tensor.

Unlike a real device it keeps no timeline of its own: a profiler sees the host only.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch
from torch.library import Library
from torch.utils._pytree import tree_flatten, tree_map

BACKEND = "neuron"
if torch._C._get_privateuse1_backend_name() != BACKEND:
    torch.utils.rename_privateuse1_backend(BACKEND)
DEVICE = torch.device(BACKEND, 0)

#: Operators the device runs itself (overload packets of ``torch.ops.aten``).
SUPPORTED = frozenset(
    {
        # compute
        "mm", "addmm", "bmm", "add", "add_", "sub", "mul", "mul_", "div", "relu",
        "threshold_backward", "sum", "mean", "convolution", "convolution_backward",
        "_log_softmax", "_log_softmax_backward_data", "nll_loss_forward", "nll_loss_backward",
        "_foreach_add_", "_foreach_mul_", "addcmul_", "fill_", "zero_", "neg",
        # plumbing every backend has: views, copies, allocation, scalars
        "view", "_unsafe_view", "t", "transpose", "expand", "as_strided", "permute",
        "unsqueeze", "squeeze", "select", "slice", "detach", "alias", "clone", "copy_",
        "_to_copy", "empty_like", "zeros_like", "ones_like", "new_empty", "new_empty_strided",
        "new_zeros", "_local_scalar_dense", "_reshape_alias", "lift_fresh",
    }
)  # fmt: skip

_WARNING = (
    "neuron_sim: {op} is not lowered for the Neuron device yet; it will be executed on CPU "
    "and its tensors moved back and forth, which may reduce performance."
)
_warned: set[str] = set()


class NeuronTensor(torch.Tensor):
    """A tensor on ``neuron:0``: a wrapper whose values live in a CPU tensor, ``elem``."""

    elem: torch.Tensor

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> NeuronTensor:
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), storage_offset=elem.storage_offset(),
            dtype=elem.dtype, layout=elem.layout, device=DEVICE,
            requires_grad=elem.requires_grad,
        )  # fmt: skip
        r.elem = elem
        return r

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        return f"NeuronTensor({self.elem!r}, device='{DEVICE}')"

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_cpu.default:
            return [t.elem.clone() for t in args[0]]
        if func.overloadpacket.__name__ in SUPPORTED:
            return _run(func, args, kwargs)
        return _fallback(func, args, kwargs)


def _unwrap(x: Any) -> Any:
    return x.elem if isinstance(x, NeuronTensor) else x


def _kwargs_on_host(kwargs: dict[str, Any]) -> dict[str, Any]:
    out = dict(kwargs)
    if "device" in out and torch.device(out["device"]).type == BACKEND:
        out["device"] = torch.device("cpu")
    return out


def _run(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """A supported op: the same aten op on the wrapped data; results wrapped again."""
    name = func.overloadpacket.__name__
    if name == "_to_copy" and torch.device(kwargs.get("device") or DEVICE).type == "cpu":
        return func(_unwrap(args[0]), **kwargs)  # to the host: a plain CPU tensor
    if name == "copy_":
        dst, src = args[0], args[1]
        _unwrap(dst).copy_(_unwrap(src))
        return dst
    out = func(*tree_map(_unwrap, args), **_kwargs_on_host(kwargs))
    if name.endswith("_") and isinstance(args[0], NeuronTensor):
        return args[0]  # in place: the device tensor itself
    if name.startswith("_foreach") and name.endswith("_"):
        return None
    return tree_map(lambda x: NeuronTensor(x) if isinstance(x, torch.Tensor) else x, out)


def _fallback(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """Run an unsupported operator on the CPU: warn, copy out, compute, copy back."""
    op = func._schema.name
    if op not in _warned or os.environ.get("NEURON_SIM_WARN_ALWAYS") == "1":
        _warned.add(op)
        warnings.warn(_WARNING.format(op=op), RuntimeWarning, stacklevel=3)
    flat, _ = tree_flatten((args, kwargs))
    on_device = [x for x in flat if isinstance(x, NeuronTensor)]
    if os.environ.get("NEURON_SIM_MOVE") == "to":  # one tensor at a time, as .to("cpu") does
        host = [torch.ops.aten._to_copy.default(t, device=torch.device("cpu")) for t in on_device]
    else:
        host = torch.ops.aten._to_cpu.default(on_device) if on_device else []
    moved = {id(d): h for d, h in zip(on_device, host, strict=True)}
    cpu_args, cpu_kwargs = tree_map(lambda x: moved.get(id(x), x), (args, kwargs))
    out = func(*cpu_args, **_kwargs_on_host(cpu_kwargs))
    written = {}
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            orig = args[i] if i < len(args) else kwargs.get(a.name)
            if isinstance(orig, NeuronTensor):
                torch.ops.aten.copy_.default(orig, moved[id(orig)])
                written[id(moved[id(orig)])] = orig

    def back(x: Any) -> Any:
        if not isinstance(x, torch.Tensor) or isinstance(x, NeuronTensor):
            return x
        if id(x) in written:
            return written[id(x)]
        dst = NeuronTensor(torch.empty_like(x))
        return torch.ops.aten.copy_.default(dst, x)

    return tree_map(back, out)


# -- the device module, guard and hooks PyTorch expects of a backend ------------------------
class _DeviceModule:
    """``torch.neuron``."""

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def set_device(index: int) -> None:
        return None

    @staticmethod
    def synchronize(device: Any = None) -> None:
        return None

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        return None

    @staticmethod
    def get_amp_supported_dtype() -> list[torch.dtype]:
        return [torch.float32]


class _Hooks(torch._C._acc.PrivateUse1Hooks):  # type: ignore[misc]
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):  # type: ignore[misc]
    def type_(self) -> Any:
        return torch._C._autograd.DeviceType.PrivateUse1


def _empty(size: Any, *, dtype: Any = None, layout: Any = None, device: Any = None,
           pin_memory: Any = None, memory_format: Any = None) -> torch.Tensor:  # fmt: skip
    return NeuronTensor(torch.empty(size, dtype=dtype or torch.get_default_dtype()))


def _empty_strided(size: Any, stride: Any, *, dtype: Any = None, layout: Any = None,
                   device: Any = None, pin_memory: Any = None) -> torch.Tensor:  # fmt: skip
    return NeuronTensor(torch.empty_strided(size, stride, dtype=dtype or torch.get_default_dtype()))


def _register() -> None:
    torch._register_device_module(BACKEND, _DeviceModule())
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=False)
    torch._C._acc.register_python_privateuseone_hook(_Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(_Guard())
    lib = Library("aten", "IMPL")
    lib.impl("empty.memory_format", _empty, "PrivateUse1")
    lib.impl("empty_strided", _empty_strided, "PrivateUse1")
    _LIBRARIES.append(lib)


_LIBRARIES: list[Library] = []
_register()
