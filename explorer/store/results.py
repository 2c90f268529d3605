"""Analysis results kept beside a store entry's tables, so a second report does not redo them.

The trace cache's entry of a trace holds its tables; the analyses over them (steps, the
breakdown, findings, the critical path, ...) take several times as long as reopening the
tables. A result listed in :data:`STORED_RESULTS` is written, once computed, into the
entry's ``results/`` directory and read back by the next process that asks for it — the
report, the export, the viewer and ``explorer sql`` all go through the same memo
(:class:`explorer.trace.memo.Memo`), so whichever computes a result first pays for it.

A stored result is found under a digest of everything it was computed from:

* the entry's tables (their checksums, from the entry's header: a re-parsed trace is a
  new entry with new files, and the old entry's results go with it),
* the analysis code (a digest of the source of ``explorer.analysis``, ``explorer.trace``
  and ``explorer.report``,
  so a changed rule never reads a result of the old one) and :data:`RESULTS_VERSION`,
* the result's name, its options (the function's arguments) and the trace's settings
  (step pattern and nesting: a report with ``--steps REGEX`` is a different result).

The tables themselves are never touched: each result is a new directory (``tree.json``,
the result's shape with its plain values, and one Arrow IPC file per frame or array, each
with its size and CRC-32 in ``value.json``), written complete under a temporary name and
moved into place by rename. Anything that does not read back exactly as listed is ignored
and computed again; a result that cannot be written (read-only or full cache) is simply
not stored. Nothing is unpickled: only plain values, numpy arrays, pandas frames and
Explorer's own result dataclasses (already imported by the analysis asking) are rebuilt.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import weakref
from collections.abc import Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa

from explorer.store.header import checksum, file_size_and_checksum
from explorer.store.result_files import (
    RESULTS_DIR,
    TREE_FILE,
    VALUE_FILE,
    decode_tree,
    plain_options,
    read_checked_file,
    read_value,
    result_digest,
    tables_digest,
)
from explorer.trace.memo import NOT_STORED

if TYPE_CHECKING:
    from explorer.trace.model import TraceData

#: The memo results worth keeping on disk: what a report, an export or the viewer's panels
#: need and takes long to compute (per-slice intermediates are cheaper to recompute than to
#: verify, and are only needed to compute these).
STORED_RESULTS: frozenset[str] = frozenset(
    {
        "steps",
        "attributed_steps",
        "breakdown",
        "findings",
        "predicted_findings",
        "by_source",
        "partial_steps",
        "step_origin",
        "before_capture",
        "memory_timeline",
        "memory_allocations",
        "fallback_calls",
        "critical_path",
        "cross_track_waits",
        # a code per slice, but 0.8 s to rebuild on 1M events (every slice's Python
        # stack walked): what the export's source annotations and the path's lines read
        "frame_codes",
        # the report's whole document (explorer.report.document), for a repeat report
        "report_document",
    }
)

#: What a lookup returns when there is no stored result (the memo's own marker).
MISSING: Any = NOT_STORED


class Unstorable(Exception):
    """A value the codec does not write (the result is then just not stored)."""


class ResultStore:
    """The stored results of one store entry, for one trace opened from it."""

    #: Each result written straight into the entry's directory (aside, then renamed into
    #: place): any process may store one, a forked child too.
    SAVES_AT_ONCE = True

    def __init__(self, entry: Path, header: dict[str, Any], trace: TraceData) -> None:
        self.directory = Path(entry) / RESULTS_DIR
        self._tables = tables_digest(header)
        self._trace = weakref.ref(trace)

    def for_trace(self, trace: TraceData) -> ResultStore:
        """These results for ``trace``, a view of this one's trace under other step options
        (keyed by that view's options)."""
        out = copy.copy(self)
        out._trace = weakref.ref(trace)
        return out

    def _digest(self, name: str, options: Hashable) -> str | None:
        trace = self._trace()
        if trace is None or name not in STORED_RESULTS or not plain_options(options):
            return None
        return result_digest(self._tables, name, options, trace.step_pattern, trace.step_nesting)

    def load(self, name: str, options: Hashable) -> Any:
        """The stored result, or :data:`MISSING`."""
        digest = self._digest(name, options)
        if digest is None:
            return MISSING
        d = self.directory / digest
        try:
            tree, files = read_value(d, name)
            tables = [_read_table(d / f"{i}.arrow", meta) for i, meta in enumerate(files)]
            return _decode(tree, tables)
        except MemoryError:
            raise
        except Exception:  # absent, partial, damaged or foreign: compute it again
            return MISSING

    def has(self, name: str, options: Hashable) -> bool:
        """Whether a result is stored (its directory is complete once it exists: written
        aside and renamed into place)."""
        digest = self._digest(name, options)
        return digest is not None and (self.directory / digest).is_dir()

    def save(self, name: str, options: Hashable, value: Any) -> None:
        """Store ``value`` (silently not, when it cannot be encoded or written)."""
        digest = self._digest(name, options)
        if digest is None or (self.directory / digest).exists():
            return
        tables: list[pa.Table] = []
        try:
            tree = _encode(value, tables)
        except Unstorable:
            return
        tmp: str | None = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            tmp = tempfile.mkdtemp(prefix=f".{digest}.", dir=self.directory)
            files = []
            for i, table in enumerate(tables):
                path = Path(tmp) / f"{i}.arrow"
                with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
                    w.write_table(table)
                # read back a block at a time: the whole file held in memory again was the
                # top of a first report's memory (the critical path's ~30 MB of edges)
                size, crc = file_size_and_checksum(path)
                files.append({"bytes": size, "crc32": crc})
            data = json.dumps(tree).encode()
            (Path(tmp) / TREE_FILE).write_bytes(data)
            doc = {
                "name": name,
                "files": files,
                "tree": {"bytes": len(data), "crc32": checksum(data)},
            }
            (Path(tmp) / VALUE_FILE).write_text(json.dumps(doc))
            os.rename(tmp, self.directory / digest)
            tmp = None
        except (OSError, pa.ArrowException, ValueError, TypeError):
            pass  # not stored: the next process computes it again
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)


def attach(trace: TraceData, entry: Path, header: dict[str, Any]) -> None:
    """Let ``trace``'s memo read and write its results in ``entry``'s ``results/``."""
    trace.memo.store = ResultStore(entry, header, trace)


class PendingStore:
    """The results of a cache entry still being written (:class:`~explorer.store.cache.
    CacheWrite`), for one trace (or a view of it under other step options): the entry is
    new, so it holds no result yet — every lookup finds none — and what the analyses save
    meanwhile is kept here, then stored when the entry is written (:meth:`resolve`), or
    dropped when it could not be. Afterwards it reads and writes the entry's results as a
    :class:`ResultStore` does. ``owner`` is whatever writes the entry (the cache's
    :class:`~explorer.store.cache.CacheWrite`), for a caller that has only the trace."""

    #: Kept until the entry exists (a child's copy of them would be lost with it).
    SAVES_AT_ONCE = False

    def __init__(self, owner: Any, trace: TraceData) -> None:
        self.owner = owner
        self._trace = weakref.ref(trace)
        self._resolved = False
        self._real: ResultStore | None = None
        self._saves: list[tuple[str, Hashable, Any]] = []
        self._views: list[PendingStore] = []

    def load(self, name: str, options: Hashable) -> Any:
        return self._real.load(name, options) if self._real is not None else MISSING

    def has(self, name: str, options: Hashable) -> bool:
        return self._real is not None and self._real.has(name, options)

    def save(self, name: str, options: Hashable, value: Any) -> None:
        if self._real is not None:
            self._real.save(name, options, value)
        elif not self._resolved:
            self._saves.append((name, options, value))

    def for_trace(self, trace: TraceData) -> PendingStore | ResultStore:
        if self._resolved:
            return (
                self._real.for_trace(trace) if self._real is not None else PendingStore.none(trace)
            )
        view = PendingStore(self.owner, trace)
        self._views.append(view)
        return view

    @classmethod
    def none(cls, trace: TraceData) -> PendingStore:
        """A store that never holds anything (the entry could not be written)."""
        out = cls(None, trace)
        out._resolved = True
        return out

    def resolve(self, entry: Path | None, header: dict[str, Any] | None) -> None:
        """The entry is written (``entry``, with ``header``), or could not be (None): the
        results saved meanwhile are stored, or dropped; this store's views follow."""
        trace = self._trace()
        if entry is not None and header is not None and trace is not None:
            self._real = ResultStore(entry, header, trace)
        self._resolved = True
        saves, self._saves = self._saves, []
        for name, options, value in saves:
            self.save(name, options, value)
        views, self._views = self._views, []
        for view in views:
            view.resolve(entry, header)


# -- the codec ---------------------------------------------------------------------------


def _read_table(path: Path, meta: dict[str, Any]) -> pa.Table:
    return pa.ipc.open_file(pa.py_buffer(read_checked_file(path, meta))).read_all()


def _encode(v: Any, tables: list[pa.Table]) -> Any:
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, (int, float)) and type(v) in (int, float):
        return v
    if isinstance(v, np.generic):
        if v.dtype.kind not in "biuf":
            raise Unstorable(type(v))
        return {"~": "np", "dtype": v.dtype.str, "v": v.item()}
    if isinstance(v, (list, tuple)):
        return {"~": type(v).__name__, "v": [_encode(x, tables) for x in v]}
    if isinstance(v, dict) and type(v) is dict:
        return {
            "~": "dict",
            "k": [_encode(k, tables) for k in v],
            "v": [_encode(x, tables) for x in v.values()],
        }
    if isinstance(v, np.ndarray):
        if v.dtype.kind not in "biuf" or v.dtype.byteorder == ">":
            raise Unstorable(v.dtype)
        tables.append(pa.table({"a": pa.array(v.reshape(-1))}))
        return {"~": "array", "t": len(tables) - 1, "dtype": v.dtype.str, "shape": list(v.shape)}
    if isinstance(v, pd.DataFrame):
        return _encode_frame(v, tables)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        cls = type(v)
        if not cls.__module__.startswith("explorer."):
            raise Unstorable(cls)
        return {
            "~": "dc",
            "m": cls.__module__,
            "q": cls.__qualname__,
            "f": {f.name: _encode(getattr(v, f.name), tables) for f in dataclasses.fields(v)},
        }
    raise Unstorable(type(v))


def _encode_frame(df: pd.DataFrame, tables: list[pa.Table]) -> Any:
    """A frame as one table of its columns (by position) plus the dtypes to restore."""
    if not isinstance(df.index, pd.RangeIndex) or df.columns.has_duplicates:
        raise Unstorable("frame index")
    cols: dict[str, pa.Array] = {}
    kinds: list[Any] = []
    for i, (_, s) in enumerate(df.items()):
        dtype = s.dtype
        if isinstance(dtype, pd.CategoricalDtype):
            cats = dtype.categories
            if cats.dtype.kind not in "OU" and not pd.api.types.is_string_dtype(cats.dtype):
                raise Unstorable("categories")
            cols[str(i)] = pa.array(s.cat.codes.to_numpy())
            kinds.append(["cat", [str(c) for c in cats], bool(dtype.ordered), str(cats.dtype)])
        elif isinstance(dtype, np.dtype) and dtype.kind in "biuf":
            cols[str(i)] = pa.array(s.to_numpy())
            kinds.append(["np", dtype.str])
        elif isinstance(dtype, np.dtype) and dtype.kind == "O":
            values = s.to_numpy()
            if not all(isinstance(x, str) for x in values):
                raise Unstorable("mixed object column")
            cols[str(i)] = pa.array(values, type=pa.large_string())
            kinds.append(["str", "object"])
        elif isinstance(dtype, pd.StringDtype):
            cols[str(i)] = pa.array(s.array)  # Arrow-backed: no string per row
            kinds.append(["str", str(dtype)])
        else:
            raise Unstorable(dtype)
    tables.append(pa.table(cols) if cols else pa.table({}))
    return {
        "~": "frame",
        "t": len(tables) - 1,
        "columns": [_encode(c, tables) for c in df.columns],
        "kinds": kinds,
        "rows": len(df),
        "index": [df.index.start, df.index.stop, df.index.step],
    }


def _decode(v: Any, tables: list[pa.Table]) -> Any:
    return decode_tree(v, lambda node: _decode_tagged(node, tables))


def _decode_tagged(v: dict[str, Any], tables: list[pa.Table]) -> Any:
    """A node of the tree that is not a plain container (:func:`decode_tree` does those)."""
    tag = v["~"]
    if tag == "np":
        return np.dtype(v["dtype"]).type(v["v"])
    if tag == "array":
        col = tables[v["t"]].column("a").to_numpy()
        return np.array(col, dtype=np.dtype(v["dtype"])).reshape(v["shape"])
    if tag == "frame":
        return _decode_frame(v, tables)
    if tag == "dc":
        # Never imports: the analysis asking for the result defined its type.
        module = sys.modules.get(v["m"]) if str(v["m"]).startswith("explorer.") else None
        cls = getattr(module, v["q"], None) if module is not None else None
        if not isinstance(cls, type) or not dataclasses.is_dataclass(cls):
            raise ValueError(f"unknown result type {v['m']}.{v['q']}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values = {k: _decode(x, tables) for k, x in v["f"].items()}
        if set(values) != set(fields):
            raise ValueError(f"{v['q']}'s fields changed")
        out = cls(**{k: x for k, x in values.items() if fields[k].init})
        for k, x in values.items():
            if not fields[k].init:
                object.__setattr__(out, k, x)
        return out
    raise ValueError(f"unknown tag {tag!r}")


def _decode_frame(v: dict[str, Any], tables: list[pa.Table]) -> pd.DataFrame:
    table = tables[v["t"]]
    start, stop, step = v["index"]
    index = pd.RangeIndex(start, stop, step)
    data: dict[Any, Any] = {}
    columns = [_decode(c, tables) for c in v["columns"]]
    for i, kind in enumerate(v["kinds"]):
        arr = table.column(str(i))
        if kind[0] == "cat":
            codes = np.asarray(arr.to_numpy())
            cats = pd.Index(kind[1], dtype=kind[3])
            dtype = pd.CategoricalDtype(cats, ordered=kind[2])
            col: Any = pd.Categorical.from_codes(codes, dtype=dtype)
        elif kind[0] == "np":
            col = np.array(arr.to_numpy(zero_copy_only=False), dtype=np.dtype(kind[1]))
        else:
            col = arr.to_pandas().astype(object if kind[1] == "object" else kind[1])
        data[i] = pd.Series(col, copy=False).set_axis(index)
    if not data:
        return pd.DataFrame(index=index, columns=pd.Index(columns))
    out = pd.DataFrame(data, index=index)
    out.columns = pd.Index(columns)
    if len(out) != v["rows"]:
        raise ValueError("frame rows differ")
    return out
