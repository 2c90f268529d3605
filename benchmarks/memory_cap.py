"""Run a command with its memory capped, the way a container or a batch scheduler caps it,
and say whether it finished and how much memory it held.

    python benchmarks/memory_cap.py --limit 2G [--watch] -- python -m explorer info BIG.json

The cap is a memory cgroup (v1 ``memory.limit_in_bytes`` or v2 ``memory.max``, a child of
this process's own cgroup; needs write access to it, e.g. root in a container): what
Docker, Kubernetes and Slurm impose. Like them it counts the command's anonymous memory
and the page cache it fills, and when the total reaches the cap the kernel first drops
clean file pages (the trace's text it read, a memory-mapped store) and only then kills
the command. Where no cgroup can be made, ``RLIMIT_DATA`` caps the command's private
writable memory instead (file mappings are not counted; allocations beyond it fail with
``MemoryError`` rather than a kill) and the output says so. ``RLIMIT_AS`` is not used: it
caps address space, so it refuses to map a file larger than the cap at all, which is not
a limit on memory.

Prints one JSON line: the command's exit status, whether it was killed for memory, wall
seconds, the cap and how it was applied, and the peak of the command's resident anonymous
memory plus mapped file pages (sampled every 50 ms from the cgroup's ``memory.stat``, or
from the processes' ``/proc`` where no cgroup was made).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def parse_size(text: str) -> int:
    """``2G``, ``1536M``, ``2147483648`` → bytes (powers of 1024)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = t[-1:] if t[-1:] in _UNITS else ""
    return int(float(t[: len(t) - len(unit)]) * _UNITS[unit])


def _own_cgroup() -> tuple[str, Path] | None:
    """(version, directory) of this process's memory cgroup, when a child can be made."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, rel = line.split(":", 2)
        if "memory" in controllers.split(","):
            d = Path("/sys/fs/cgroup/memory") / rel.lstrip("/")
            if (d / "memory.limit_in_bytes").exists() and os.access(d, os.W_OK):
                return "v1", d
        if controllers == "":
            d = Path("/sys/fs/cgroup") / rel.lstrip("/")
            ok = "memory" in (d / "cgroup.subtree_control").read_text() if d.exists() else False
            if ok and os.access(d, os.W_OK):
                return "v2", d
    return None


class _Cgroup:
    def __init__(self, version: str, parent: Path, limit: int) -> None:
        self.version = version
        self.dir = parent / f"explorer-cap-{uuid.uuid4().hex[:8]}"
        self.dir.mkdir()
        limit_file = "memory.limit_in_bytes" if version == "v1" else "memory.max"
        (self.dir / limit_file).write_text(str(limit))
        swap = self.dir / ("memory.memsw.limit_in_bytes" if version == "v1" else "memory.swap.max")
        if swap.exists():
            try:
                swap.write_text(str(limit) if version == "v1" else "0")
            except OSError:
                pass  # swap accounting off: there is no swap to limit

    def enter(self) -> None:
        (self.dir / "cgroup.procs").write_text(str(os.getpid()))

    def resident(self) -> int:
        """Anonymous memory plus mapped file pages of everything in the cgroup."""
        stat = dict(
            (k, int(v))
            for k, v in (
                line.split() for line in (self.dir / "memory.stat").read_text().splitlines()
            )
        )
        if self.version == "v1":
            return stat.get("total_rss", stat.get("rss", 0)) + stat.get(
                "total_mapped_file", stat.get("mapped_file", 0)
            )
        return stat.get("anon", 0) + stat.get("file_mapped", 0)

    def oom_killed(self) -> bool:
        if self.version == "v1":
            text = (self.dir / "memory.oom_control").read_text()
            return any(
                ln.startswith("oom_kill ") and ln.split()[1] != "0" for ln in text.splitlines()
            )
        events = (self.dir / "memory.events").read_text()
        return any(
            ln.startswith("oom_kill ") and ln.split()[1] != "0" for ln in events.splitlines()
        )

    def remove(self) -> None:
        for _ in range(50):
            try:
                self.dir.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def _tree_resident(pid: int) -> int:
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def run_capped(cmd: list[str], limit: int, env: dict[str, str] | None = None) -> dict[str, object]:
    """Run ``cmd`` under a memory cap of ``limit`` bytes; what happened (see the module
    docstring)."""
    found = _own_cgroup()
    group = _Cgroup(*found, limit) if found else None

    def preexec() -> None:
        if group is not None:
            group.enter()
        else:
            resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))

    peak = 0
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, preexec_fn=preexec)  # noqa: PLW1509 (a cap needs it)
    done = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, group.resident() if group else _tree_resident(proc.pid))
            done.wait(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    rc = proc.wait()
    wall = time.perf_counter() - started
    done.set()
    watcher.join()
    killed = group.oom_killed() if group else False
    if group is not None:
        group.remove()
    return {
        "rc": rc,
        "killed_for_memory": killed,
        "wall_s": round(wall, 2),
        "limit_bytes": limit,
        "method": f"cgroup {group.version}" if group else "RLIMIT_DATA",
        "peak_resident_mb": round(peak / 1e6, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", required=True, help="e.g. 2G, 1536M")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command")
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("give the command after --")
    print(json.dumps(run_capped(cmd, parse_size(a.limit))), flush=True)


if __name__ == "__main__":
    sys.exit(main())
