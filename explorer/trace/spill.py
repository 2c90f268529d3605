"""Event columns kept on disk while a trace larger than memory is loaded.

A first load holds every event's fields as columns until the tables are built (about 0.8×
the JSON's size, the slices' raw args half of it). When that would not fit in the memory
this process may use (:func:`memory_budget`: what the machine has free, a container's or
scheduler's cgroup limit, an ``RLIMIT_DATA``/``RLIMIT_AS``), the loader appends each
chunk's columns to files instead (:class:`Spill`) and reads them back memory-mapped:
clean file pages that the kernel drops under pressure and reads again when touched,
never anonymous memory that would have to fit. The files are unlinked as soon as they are
mapped, so nothing is left on disk when the load ends or is killed mid-way except the
hidden directory itself (``.explorer-spill-*``, removed at the end, or by the next load
once it is an hour old).

``EXPLORER_LOAD_SPILL``: ``auto`` (the default: spill when the estimate does not fit),
``always`` or ``never``.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import platform
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import psutil

from explorer.errors import TraceError

#: Memory an in-memory first load may take, as a multiple of the JSON's size: its peak
#: is 1.1-1.4x (loader and decoding workers, 1M-10M events, benchmarks/load_scale.py); the
#: rest leaves room for what the verb does next. A load expected to need more than the
#: budget spills.
IN_MEMORY_PEAK = 2.2
#: The least any first load needs: a working set for decoding chunks and building
#: tables, plus the finished tables (~0.3x the JSON, measured at 1M-12.6M events).
LEAST_WORKING = 64 << 20
LEAST_SHARE = 0.3
#: A spill directory older than this was left by a killed load.
STALE_S = 3600
_PREFIX = ".explorer-spill-"
_GLIBC = ctypes.CDLL(None) if platform.libc_ver()[0] == "glibc" else None


def _cgroup_room() -> tuple[int, str] | None:
    """(bytes the cgroup still lets this process's anonymous memory grow by, its limit as
    words), for a memory cgroup with a limit (v1 or v2); None without one."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        rel = rel.lstrip("/")
        if "memory" in controllers.split(","):
            dirs, limit_file, anon_key = (
                [Path("/sys/fs/cgroup/memory") / rel, Path("/sys/fs/cgroup/memory")],
                "memory.limit_in_bytes",
                "total_rss",
            )
        elif controllers == "":
            dirs, limit_file, anon_key = (
                [Path("/sys/fs/cgroup") / rel, Path("/sys/fs/cgroup")],
                "memory.max",
                "anon",
            )
        else:
            continue
        for d in dirs:
            try:
                text = (d / limit_file).read_text().strip()
                stat = (d / "memory.stat").read_text().split()
            except OSError:
                continue
            if text == "max" or int(text) >= 2**60:
                break  # no limit here
            stats = dict(zip(stat[0::2], stat[1::2], strict=False))
            anon = int(stats.get(anon_key, 0))
            return max(int(text) - anon, 0), f"a memory cgroup limit of {int(text) / 2**30:.1f} GiB"
    return None


def memory_budget(*, certain: bool = False) -> tuple[int, str]:
    """(bytes this process may still take, how that limit reads in words): the least of
    the memory available on the machine, a cgroup limit less what its processes hold, and
    an address-space or data limit less what this process holds (``certain``: see
    :func:`hard_limit`)."""
    vm = psutil.virtual_memory()
    free = (int(vm.available), f"{vm.available / 2**30:.1f} GiB available now")
    hard = hard_limit(certain=certain)
    return hard if hard is not None and hard[0] < free[0] else free


def hard_limit(*, certain: bool = False) -> tuple[int, str] | None:
    """Like :func:`memory_budget`, but only the limits whose breach is failure — a
    cgroup's (the kernel kills the process, with no message) and the rlimits (allocations
    fail) — not what the machine has free now (the kernel may reclaim or swap to find
    more); None without any.

    An rlimit counts reserved address space (allocators and thread pools reserve far more
    than they touch: Arrow's ~1 GB), so what is left under one lies between the limit less
    the reserved space (the default: what a decision to economise should assume) and the
    limit less the memory actually held (``certain``: what a refusal may assume, so that
    nothing is refused that could have run)."""
    best = _cgroup_room()
    vm, data, held = _statm()
    for which, name, reserved in (
        (resource.RLIMIT_AS, "an address-space limit", vm),
        (resource.RLIMIT_DATA, "a data-size limit", data),
    ):
        soft, _ = resource.getrlimit(which)
        if soft == resource.RLIM_INFINITY:
            continue
        room = soft - (held if certain else reserved)
        if best is None or room < best[0]:
            best = (max(room, 0), f"{name} of {soft / 2**30:.1f} GiB")
    return best


def rlimited() -> bool:
    """Whether this process runs under an address-space or data-size limit."""
    return any(
        resource.getrlimit(which)[0] != resource.RLIM_INFINITY
        for which in (resource.RLIMIT_AS, resource.RLIMIT_DATA)
    )


def _statm() -> tuple[int, int, int]:
    """(virtual size, data size: what RLIMIT_DATA counts, resident memory not shared with
    other processes) of this process in bytes, read with as little allocation as possible:
    it is asked when memory may be nearly exhausted."""
    fd = os.open("/proc/self/statm", os.O_RDONLY)
    try:
        fields = [int(f) for f in os.read(fd, 256).split()]
    finally:
        os.close(fd)
    page = os.sysconf("SC_PAGE_SIZE")
    return fields[0] * page, fields[5] * page, (fields[1] - fields[2]) * page


def should_spill(text_bytes: int) -> bool:
    """Whether a first load of ``text_bytes`` of JSON keeps its columns on disk (see the
    module docstring); :class:`MemoryError` when even that could not fit, before any of
    the file is read (so the user hears it at once, in one line, rather than from deep
    inside a library that ran out half-way)."""
    if memory_budget(certain=True)[0] < LEAST_WORKING + LEAST_SHARE * text_bytes:
        raise MemoryError
    mode = os.environ.get("EXPLORER_LOAD_SPILL", "auto").strip().lower() or "auto"
    if mode not in ("auto", "always", "never"):
        raise TraceError(
            Path("EXPLORER_LOAD_SPILL"),
            f"is {mode!r}, not auto, always or never",
            "set it to auto (the default), always or never, or unset it",
        )
    if mode != "auto":
        return mode == "always"
    return IN_MEMORY_PEAK * text_bytes > memory_budget()[0]


def open_spill(parent: Path | None) -> Spill | None:
    """A :class:`Spill` under ``parent``, else under the temporary directory; None when
    neither can be written (the load then holds its columns in memory)."""
    for root in dict.fromkeys((parent, None)):
        try:
            return Spill(root)
        except OSError:
            continue
    return None


class Spill:
    """Columns appended chunk by chunk to files under ``parent`` (see the module
    docstring): :meth:`add` a chunk's array, :meth:`array` the whole column mapped."""

    def __init__(self, parent: Path | None) -> None:
        root = parent if parent is not None else Path(tempfile.gettempdir())
        root.mkdir(parents=True, exist_ok=True)
        _remove_stale(root)
        self.dir = Path(tempfile.mkdtemp(prefix=_PREFIX, dir=root))
        self._files: dict[str, BinaryIO] = {}
        self._dtypes: dict[str, Any] = {}

    def add(self, key: str, data: np.ndarray | bytes | bytearray) -> None:
        f = self._files.get(key)
        if f is None:
            f = self._files[key] = open(self.dir / key, "wb")  # noqa: SIM115 (closed in array)
            self._dtypes[key] = data.dtype if isinstance(data, np.ndarray) else np.uint8
        f.write(np.ascontiguousarray(data).data if isinstance(data, np.ndarray) else data)

    def array(self, key: str, dtype: Any) -> np.ndarray:
        """Column ``key`` as one read-only array mapped from its file (empty when nothing
        was added); the file is unlinked, the mapping keeps its pages."""
        f = self._files.pop(key, None)
        if f is None:
            return np.empty(0, dtype)
        f.close()
        path = self.dir / key
        size = path.stat().st_size
        if not size:
            path.unlink()
            return np.empty(0, dtype)
        try:
            with open(path, "rb") as g:
                mapped = mmap.mmap(g.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            if exc.errno == errno.ENOMEM:  # an address-space limit: no room to map it
                raise MemoryError from None
            raise
        finally:
            path.unlink()
        return np.frombuffer(mapped, np.dtype(dtype))

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
        shutil.rmtree(self.dir, ignore_errors=True)


def _remove_stale(root: Path) -> None:
    cutoff = time.time() - STALE_S
    for p in root.glob(_PREFIX + "*"):
        try:
            stale = p.is_dir() and p.stat().st_mtime < cutoff
        except FileNotFoundError:
            continue
        if stale:
            shutil.rmtree(p, ignore_errors=True)


def release_freed_memory() -> None:
    """Give the memory freed by decoding back to the system (glibc keeps freed heap
    memory otherwise: after a load of 1M events, ~100 MB of chunk objects and chunk
    columns that the tables built next cannot reuse, being allocated elsewhere)."""
    if _GLIBC is not None:
        _GLIBC.malloc_trim(0)
