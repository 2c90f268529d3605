"""Python stacks and the user's source line for every slice.

Torch writes ``with_stack=True`` frames as ``python_function`` slices named
``"train.py(42): train_step"`` that enclose the ops they called; older traces carry a
``Call stack`` arg instead, and Explorer's collector writes ``source_file``/``source_line``
args on its own events. The *user* frame is the innermost one that is not torch, another
library, the standard library or Explorer itself — the line a person can change.

Note on precision: torch's Python tracer names each frame by the line where its function
*starts* (the code object's first line), not the line executing. So a ``python_function``
frame locates the user function; Explorer's collector events carry the exact line.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from explorer.trace.columns import category_matches
from explorer.trace.memo import memoised

if TYPE_CHECKING:
    from explorer.trace.model import TraceData

_FRAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.+)$")

#: Top-level packages whose frames are never "user code".
LIBRARY_PACKAGES = frozenset(
    {
        "torch",
        "torchvision",
        "torchaudio",
        "torchtext",
        "functorch",
        "triton",
        "numpy",
        "pandas",
        "transformers",
        "accelerate",
        "deepspeed",
        "apex",
        "lightning",
        "pytorch_lightning",
        "lightning_fabric",
        "torchmetrics",
        "timm",
        "datasets",
        "fairscale",
        "megatron",
        "xformers",
        "flash_attn",
        "torch_xla",
        "torch_neuronx",
        "torch_mlir",
        "intel_extension_for_pytorch",
        "habana_frameworks",
        "jax",
        "scipy",
        "sklearn",
        "PIL",
        "cv2",
        "tqdm",
        "einops",
        "hydra",
        "omegaconf",
        "wandb",
        "tensorboard",
        "pydevd",
        "debugpy",
        "IPython",
        "ipykernel",
        "runpy",
        "pkg_resources",
        "setuptools",
        "_pytest",
        "pytest",
        "pluggy",
    }
)
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"__future__"}
_STDLIB_DIR = Path(sysconfig.get_paths()["stdlib"])
_EXPLORER_ROOT = Path(__file__).resolve().parents[1]
#: Explorer's own modules as ``explorer/...`` paths: a frame is Explorer's when its path ends
#: in one of them (wherever the capturing machine installed it), not merely when a folder is
#: called ``explorer`` — a user's own package may be.
_EXPLORER_FILES = frozenset(
    "explorer/" + f.relative_to(_EXPLORER_ROOT).as_posix()
    for f in _EXPLORER_ROOT.rglob("*.py")
    if f.name != "demo_workload.py"  # the demo runs a copy of it as the user's script
)


#: Where library code lives, by path alone: an installation's ``site-packages`` or
#: ``dist-packages``, a Python installation's ``lib/pythonX.Y``, or torch itself. A path is
#: judged by what it says, not by what is installed on the machine that reads the trace.
_LIBRARY_PATH = re.compile(
    r"(?:^|/)(?:site-packages|dist-packages)/|(?:^|/)lib(?:64)?/python\d[\d.]*/|(?:^|/)torch/",
    re.IGNORECASE,
)


def is_library_path(path: str) -> bool:
    """True for a file under site-packages/dist-packages, a Python installation's lib
    directory, or torch — library code wherever the trace is read."""
    return bool(_LIBRARY_PATH.search(path.replace("\\", "/")))


def is_explorer_file(path: str) -> bool:
    """True for a frame in one of Explorer's own modules (the collector's context manager,
    ``annotate()``, the CLI, the ``explorer`` console script), whatever prefix the capturing
    machine had."""
    p = path.replace("\\", "/")
    if p == "explorer" or p.endswith("/bin/explorer"):
        return True  # the console script (torch names it relative to its own directory)
    at = p.rfind("explorer/")
    while at >= 0:
        if (at == 0 or p[at - 1] == "/") and p[at:] in _EXPLORER_FILES:
            return True
        at = p.rfind("explorer/", 0, at)
    return False


def parse_frame(text: str) -> tuple[str, int, str] | None:
    """``"train.py(42): step"`` → ("train.py", 42, "step"); None when it is not a frame."""
    m = _FRAME.match(text)
    if not m:
        return None
    return m.group("file"), int(m.group("line")), m.group("func")


@functools.lru_cache(maxsize=4096)
def _installed_package(top: str) -> bool:
    """True when ``top`` is a package installed in this Python's site-packages (psutil,
    a data library...): its frames are library code, wherever the trace was captured.
    Looks the module up without importing it."""
    if not top.isidentifier():
        return False
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    origin = (spec.origin or "") if spec else ""
    if not origin and spec and spec.submodule_search_locations:
        origin = next(iter(spec.submodule_search_locations), "")
    return "site-packages" in origin or "dist-packages" in origin


def is_user_file(path: str, library_modules: frozenset[str] = frozenset()) -> bool:
    """False for torch, other libraries, the standard library and Explorer's own code.

    ``library_modules`` are the top-level modules the capturing process loaded from library
    directories (the collector records them): torch names a frame relative to the
    ``sys.path`` entry it was found in (``neuron_sim/__init__.py``), which hides the
    ``site-packages`` the file lived in."""
    if not path or path.startswith("<"):
        return False
    p = path.replace("\\", "/")
    if is_library_path(p):
        return False
    if is_explorer_file(p):
        return False  # Explorer's own code (the collector's context manager, annotate())
    parts = [s for s in p.split("/") if s and s != "."]
    if not parts:
        return False
    if p.startswith("/"):
        return True  # absolute paths outside the library prefixes above are the user's
    top = parts[0][:-3] if parts[0].endswith(".py") else parts[0]
    if (
        top in LIBRARY_PACKAGES
        or top in library_modules
        or (top != "explorer" and _installed_package(top))
    ):
        return False
    # A stdlib name is only the stdlib when the file is one: a user's ``trace/run.py`` or
    # ``test/x.py`` shares a name with a stdlib module but is theirs.
    return not (top in _STDLIB and (_STDLIB_DIR / p).exists())


@memoised("user_frames")
def user_frames(trace: TraceData) -> pd.DataFrame:
    """For every slice, its innermost user frame: columns ``file``, ``line``, ``function``
    ('' / -1 when the trace holds no stack for it). Cached on the trace.

    A slice with a frame of its own (a user ``python_function``, a collector event with
    ``source_file``) uses it; any other slice inherits its nearest ancestor's. Propagation
    runs one depth level at a time, so the cost is a few numpy passes, not a walk per slice.
    """
    frames = _FrameTable()
    own = np.zeros(len(trace.slices), np.int64)  # index into ``frames``; 0 = none
    library = library_modules(trace)
    _own_python_frames(trace, frames, own, library)
    _own_collector_frames(trace, frames, own, library)
    if trace.metadata.get("has_call_stack_args"):
        _own_call_stack_frames(trace, frames, own, library)
    files = _unify_spellings(frames.files)
    # Inherit from the parent, shallowest first.
    frame = trace.inherit_down(own, keep=own != 0)
    # The columns categorised over the frames in use, then spread by integer codes: the
    # same categoricals as from one string per slice, without making them.
    used, at = np.unique(frame, return_inverse=True)
    out = pd.DataFrame(
        {
            "file": _spread(np.asarray(files, dtype=object)[used], at),
            "line": np.asarray(frames.lines, np.int64)[frame],
            "function": _spread(np.asarray(frames.funcs, dtype=object)[used], at),
        }
    )
    return out


def _spread(values: np.ndarray, at: np.ndarray) -> pd.Categorical:
    """``pd.Categorical(values[at])``, categorised over ``values`` alone."""
    small = pd.Categorical(values)
    return pd.Categorical.from_codes(small.codes[at], dtype=small.dtype)


#: Functions only a backend or a tensor-subclass library defines: the package whose frame
#: runs one is library code (a vendor backend's ``__torch_dispatch__``).
_BACKEND_HOOKS = frozenset({"__torch_dispatch__"})


def library_modules(trace: TraceData) -> frozenset[str]:
    """The top-level modules that are library code in this trace: those the capturing
    process loaded from library directories, as Explorer's collector recorded them, and
    the packages whose frames run a backend's dispatch (``neuron_sim/__init__.py(79):
    __torch_dispatch__``) — what a trace from torch.profiler alone still tells."""
    block = trace.metadata.get("explorer")
    names = block.get("library_modules") if isinstance(block, dict) else None
    recorded = {str(n) for n in names} if isinstance(names, list) else set()
    s = trace.slices
    python = s["name"].cat.categories[
        np.unique(s["name"].cat.codes.to_numpy()[np.asarray(s["kind"] == "python")])
    ] if len(s) else []  # fmt: skip
    for name in python:
        f = parse_frame(str(name))
        if f and f[2] in _BACKEND_HOOKS and not f[0].startswith("/") and "/" in f[0]:
            recorded.add(f[0].split("/", 1)[0])  # a package's module, not a lone script
    return frozenset(recorded)


class _FrameTable:
    """The distinct frames :func:`user_frames` found, as three parallel lists; row 0 is
    "no frame" ('' / -1 / '')."""

    def __init__(self) -> None:
        self.files: list[str] = [""]
        self.lines: list[int] = [-1]
        self.funcs: list[str] = [""]

    def add(self, file: str, line: int, function: str) -> int:
        """Appends a frame; its row."""
        self.files.append(file)
        self.lines.append(line)
        self.funcs.append(function)
        return len(self.files) - 1


def _own_python_frames(
    trace: TraceData, frames: _FrameTable, own: np.ndarray, library: frozenset[str]
) -> None:
    """python_function slices whose frame is user code: one parse per distinct name."""
    s = trace.slices
    is_py = np.asarray(s["kind"] == "python")
    if not is_py.any():
        return
    names = s["name"].cat.categories
    frame_of_name = np.zeros(len(names) + 1, np.int64)
    for k, nm in enumerate(names):
        f = parse_frame(str(nm))
        if f and is_user_file(f[0], library):
            frame_of_name[k] = frames.add(f[0], f[1], f[2])
    codes = s["name"].cat.codes.to_numpy()
    own[is_py] = frame_of_name[codes[is_py]]


#: The categories of the events Explorer's collector writes.
_COLLECTOR_CAT = re.compile(r"^explorer_")


def _own_collector_frames(
    trace: TraceData, frames: _FrameTable, own: np.ndarray, library: frozenset[str]
) -> None:
    """Explorer collector events with their own ``source_file``/``source_line`` args, when
    that frame is user code (with no user frame on the stack — autograd's threads — the
    collector names the innermost library frame; such an event inherits instead)."""
    for i in np.flatnonzero(category_matches(trace.slices["cat"], _COLLECTOR_CAT)):
        a = trace.args(int(i))
        f, ln = a.get("source_file"), a.get("source_line")
        if f and isinstance(ln, int) and is_user_file(str(f), library):
            own[i] = frames.add(str(f), ln, str(a.get("source_function", "")))


def _own_call_stack_frames(
    trace: TraceData, frames: _FrameTable, own: np.ndarray, library: frozenset[str]
) -> None:
    """Slices still without a frame that carry old-style ``Call stack`` args: the first
    user frame in the stack."""
    for i in np.flatnonzero(own == 0):
        cs = trace.args(int(i)).get("Call stack")
        if not cs:
            continue
        for frame_text in str(cs).split(";"):
            f = parse_frame(frame_text.strip())
            if f and is_user_file(f[0], library):
                own[i] = frames.add(f[0], f[1], f[2])
                break


def _unify_spellings(files: list[str]) -> list[str]:
    """One spelling per file: torch names frames relative to ``sys.path`` (``train.py``)
    while the collector writes absolute paths (``/home/me/train.py``); a relative name that
    is the tail of exactly one absolute name becomes that absolute name."""
    absolute = sorted({f for f in files if f.startswith("/")})
    if not absolute:
        return files
    mapping: dict[str, str] = {}
    for rel in {f for f in files if f and not f.startswith("/")}:
        hits = [a for a in absolute if a.endswith("/" + rel)]
        if len(hits) == 1:
            mapping[rel] = hits[0]
    return [mapping.get(f, f) for f in files] if mapping else files


def stack_of(trace: TraceData, slice_id: int) -> list[tuple[str, int, str]]:
    """All Python frames enclosing a slice, innermost first (library frames included)."""
    s = trace.slices
    out: list[tuple[str, int, str]] = []
    i = slice_id
    kind = s["kind"].to_numpy()
    names = s["name"]
    parent = s["parent"].to_numpy()
    while i >= 0:
        if kind[i] == "python":
            f = parse_frame(str(names.iat[i]))
            if f:
                out.append(f)
        i = int(parent[i])
    if not out:
        a = trace.args(slice_id)
        if a.get("source_file"):
            out.append(
                (
                    str(a["source_file"]),
                    int(a.get("source_line", -1)),
                    str(a.get("source_function", "")),
                )
            )
        for frame_text in str(a.get("Call stack", "")).split(";"):
            f = parse_frame(frame_text.strip())
            if f:
                out.append(f)
    return out
