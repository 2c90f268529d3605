"""How much memory this process may still use, and giving back what it freed.

A process's memory is bounded by what the machine has free, and harder by a memory cgroup
(what Docker, Kubernetes and Slurm set: the kernel kills the process at the limit, without
a word) or an rlimit (``ulimit -v``/``-d``: allocations fail). The loader asks before it
decides to keep columns on disk (:mod:`explorer.trace.spill`) or to refuse a trace it
cannot load; the verbs ask before whole-trace analyses
(:mod:`explorer.analysis.memory_need`).
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import platform
import resource
import weakref
from pathlib import Path

import psutil

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


def ensure_room(nbytes: int) -> None:
    """:class:`MemoryError` unless a hard limit leaves this process ``nbytes`` more. For
    a native library that, short of memory, spins forever rather than failing (scipy's
    OpenBLAS, initialising its threads under a data-size limit): asked before loading it,
    so the user hears "out of memory" instead of waiting on a hung process."""
    limit = hard_limit()
    if limit is not None and limit[0] < nbytes:
        raise MemoryError


def held_bytes() -> int:
    """Memory this process holds: resident and not shared with other processes."""
    return _statm()[2]


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


#: The files this process maps read-only (a store entry's tables and args), while mapped
#: (:func:`mapped_read_only`).
_MAPPED: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()


def mapped_read_only(m: mmap.mmap) -> mmap.mmap:
    """``m``, a read-only mapping of a file, listed so that :func:`release_freed_memory`
    unmaps the pages of it this process has touched."""
    _MAPPED.add(m)
    return m


def release_freed_memory() -> None:
    """Give the memory freed so far back to the system: glibc keeps freed heap memory
    otherwise, in every thread's heap (``malloc_trim`` returns each free page of each).
    And the pages touched so far of the files mapped read-only (:func:`mapped_read_only`)
    are unmapped from this process: they stay in the page cache, and a page read again is
    mapped again at its first touch (a minor fault, no I/O). A first report on 1M events
    maps its tables once the entry is written, then reads columns for each analysis: at
    the critical path's search it held ~10 MB of pages no stage after reads.

    After a load of 1M events, ~100 MB of chunk objects and chunk columns that the tables
    built next cannot reuse, being allocated elsewhere. The viewer, which runs each
    analysis and each panel's job in a worker thread, calls this after each: on a 1M-slice
    H100 trace it ended holding 1,067-1,106 MB without, 420 MB of it freed memory, and
    634-665 MB with; its peak fell 1,175-1,235 -> 903-925 MB, at no cost in time (mapping
    every large block on its own, ``mallopt``, gave the same memory but took the report
    14% longer: each temporary's pages faulted in afresh)."""
    if _GLIBC is not None:
        _GLIBC.malloc_trim(0)
    for m in list(_MAPPED):
        with contextlib.suppress(ValueError, OSError):  # closed meanwhile
            m.madvise(mmap.MADV_DONTNEED)
