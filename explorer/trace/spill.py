"""Event columns kept on disk while a trace larger than memory is loaded.

A first load holds every event's fields as columns until the tables are built (about 0.8×
the JSON's size, the slices' raw args half of it). When that would not fit in the memory
this process may use (:func:`~explorer.trace.memory_limits.memory_budget`), the loader appends each
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

import contextlib
import errno
import mmap
import os
import re
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from explorer.errors import TraceError
from explorer.safe_write import os_reason
from explorer.trace.memory_limits import memory_budget

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


class SpillFailed(Exception):
    """Writing a column to its file failed (a full disk, a quota): the load starts again
    with its columns somewhere else (:func:`explorer.trace.chunked_read.read_chunked`)."""

    def __init__(self, root: Path, error: OSError) -> None:
        super().__init__(f"{root}: {os_reason(error)}")
        self.root = root
        self.error = error


class Spill:
    """Columns appended chunk by chunk to files under ``parent`` (see the module
    docstring): :meth:`add` a chunk's array, :meth:`array` the whole column mapped."""

    def __init__(self, parent: Path | None) -> None:
        root = parent if parent is not None else Path(tempfile.gettempdir())
        root.mkdir(parents=True, exist_ok=True)
        _remove_stale(root)
        self.dir = Path(tempfile.mkdtemp(prefix=_owned_prefix(os.getpid()), dir=root))
        self._files: dict[str, BinaryIO] = {}
        self._dtypes: dict[str, Any] = {}

    def add(self, key: str, data: np.ndarray | bytes | bytearray) -> None:
        """Append ``data`` to column ``key``'s file; :class:`SpillFailed` when it cannot be
        written."""
        try:
            f = self._files.get(key)
            if f is None:
                f = self._files[key] = open(self.dir / key, "wb")  # noqa: SIM115 (closed in array)
                self._dtypes[key] = data.dtype if isinstance(data, np.ndarray) else np.uint8
            f.write(np.ascontiguousarray(data).data if isinstance(data, np.ndarray) else data)
        except OSError as exc:
            raise SpillFailed(self.dir.parent, exc) from None

    def array(self, key: str, dtype: Any) -> np.ndarray:
        """Column ``key`` as one read-only array mapped from its file (empty when nothing
        was added); the file is unlinked, the mapping keeps its pages."""
        f = self._files.pop(key, None)
        if f is None:
            return np.empty(0, dtype)
        try:
            f.close()  # writes what is still buffered
        except OSError as exc:
            raise SpillFailed(self.dir.parent, exc) from None
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
            # what was buffered may not be writable (a full disk): it is removed anyway
            with contextlib.suppress(OSError):
                f.close()
        self._files.clear()
        shutil.rmtree(self.dir, ignore_errors=True)


def _owned_prefix(pid: int) -> str:
    """A spill directory's name starts with where its process's number means something
    (:func:`_pid_space`) and that number."""
    space = _pid_space()
    return f"{_PREFIX}{space}-{pid}-" if space else _PREFIX


def _pid_space() -> str:
    """This machine's name and its process-number namespace (two containers may share
    a host name and a directory, never a namespace); "" where there is none to read."""
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return ""
    return f"{socket.gethostname()}-{namespace}"


def _remove_stale(root: Path) -> None:
    """Remove what killed loads left: a spill directory of a process of this machine (and
    process namespace) that is gone — killed by the OOM killer, say: its columns can take
    gigabytes, and the user loads again at once — or one older than :data:`STALE_S` (a
    load of another machine sharing the directory, or of a version that did not name its
    process)."""
    cutoff = time.time() - STALE_S
    space = _pid_space()
    mine = re.compile(re.escape(f"{_PREFIX}{space}-") + r"(\d+)-") if space else None
    for p in root.glob(_PREFIX + "*"):
        owner = mine.match(p.name) if mine is not None else None
        try:
            stale = p.is_dir() and (
                p.stat().st_mtime < cutoff or (owner is not None and _gone(int(owner[1])))
            )
        except FileNotFoundError:
            continue
        if stale:
            shutil.rmtree(p, ignore_errors=True)


def drop_resident_pages(buffer: object, start: int = 0, stop: int | None = None) -> None:
    """Unmap from this process the pages of ``buffer`` (bytes ``start:stop`` of it; all by
    default) it has touched, when ``buffer`` is a column :meth:`Spill.array` mapped (a no-op
    otherwise). The pages stay in the page cache and are read again when next touched: for a
    column read through once (the slices' args, copied a range at a time to be written to the
    store or exported), so the process does not keep them resident. Whole pages are dropped,
    so bytes beside the range may be read again too (never wrongly: the mapping is the
    file's)."""
    owner = buffer
    while not isinstance(owner, mmap.mmap):  # memoryview -> ndarray -> memoryview -> mmap
        if isinstance(owner, memoryview):
            owner = owner.obj
        elif isinstance(owner, np.ndarray) and owner.base is not None:
            owner = owner.base
        else:
            return
    if start == 0 and stop is None:
        owner.madvise(mmap.MADV_DONTNEED)
        return
    # where ``buffer`` begins in the mapping (a view may start past its first byte)
    assert isinstance(buffer, (memoryview, np.ndarray, mmap.mmap))  # what the walk passed
    at = _address(buffer) - _address(owner)
    lo = (at + start) // mmap.PAGESIZE * mmap.PAGESIZE
    hi = len(owner) if stop is None else min(at + stop, len(owner))
    if hi > lo:
        owner.madvise(mmap.MADV_DONTNEED, lo, hi - lo)


def _address(buffer: memoryview | np.ndarray | mmap.mmap) -> int:
    return int(np.frombuffer(buffer, np.uint8).ctypes.data)


def _gone(pid: int) -> bool:
    """Whether no process ``pid`` runs on this machine (one that does, even a stranger that
    took the number, keeps its directory until it is stale)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process
        return False
    return False
