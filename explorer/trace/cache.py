"""A columnar cache of each trace's tables, so the second open of a trace is instant.

Kept in a cache directory (``$EXPLORER_CACHE_DIR``, else ``$XDG_CACHE_HOME/explorer``, else
``~/.cache/explorer``) rather than beside the trace: traces often sit on read-only or
shared storage, and a cache must never be mistaken for, or overwrite, what a user captured.
An entry is keyed by the trace's absolute path and is valid only while the file's size and
modification time and the cache format version are unchanged. Args are stored as one blob
and read from disk only when someone asks for them.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import Any

from explorer.trace.args_store import ArgsStore
from explorer.trace.model import TraceData

#: Bump when the tables' layout or the reader's output changes.
CACHE_VERSION = 7
_TABLES = ("slices", "tracks", "flows", "counters", "instants", "memory")


def cache_root() -> Path:
    env = os.environ.get("EXPLORER_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "explorer"


def _entry(path: Path) -> Path:
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:20]
    return cache_root() / digest


def _stamp(path: Path) -> dict[str, Any]:
    st = path.stat()
    return {
        "path": str(path.resolve()),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "version": CACHE_VERSION,
    }


def load_cached(path: Path, cls: type = TraceData) -> TraceData | None:
    """The cached tables of ``path``, or None when there is no valid entry."""
    entry = _entry(path)
    try:
        stamp = json.loads((entry / "stamp.json").read_text())
        if stamp != _stamp(path):
            return None
        with open(entry / "tables.pkl", "rb") as f:
            tables = pickle.load(f)
    except (OSError, ValueError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        return None
    store = ArgsStore(blob_path=entry / "args.bin")
    return cls(**tables, args_store=store)


def save_cached(path: Path, trace: TraceData) -> bool:
    """Write the cache entry atomically (temp dir, then rename). Failure is not an error:
    the trace is still loaded, just not cached (read-only home, full disk)."""
    entry = _entry(path)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=entry.name + ".", dir=entry.parent))
        tables = {t: getattr(trace, t) for t in _TABLES}
        tables["metadata"] = trace.metadata
        tables["execution_trace"] = trace.execution_trace
        with open(tmp / "tables.pkl", "wb") as f:
            pickle.dump(tables, f, protocol=pickle.HIGHEST_PROTOCOL)
        (trace.args_store or ArgsStore()).save(tmp / "args.bin")
        (tmp / "stamp.json").write_text(json.dumps(_stamp(path)))
        if entry.exists():
            shutil.rmtree(entry, ignore_errors=True)
        os.replace(tmp, entry)
        return True
    except OSError:
        shutil.rmtree(locals().get("tmp", entry.parent / "__none__"), ignore_errors=True)
        return False
