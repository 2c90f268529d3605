"""Write a trace's tables as one store entry (a directory), and open one.

An entry is immutable: it is written complete into a hidden temporary directory beside its
final place, then moved there by rename, so a reader sees the old entry, no entry, or the
new one, never a half-written one. Opening reads and verifies every file's bytes (size and
checksum from the header) before decoding any, and keeps the args' verified bytes in memory
to decode on first use: an open trace never reads its entry's files again, so another
process replacing the entry cannot change what it sees.

(The rename-based write lives here until the project's shared safe-write module lands.)
"""

from __future__ import annotations

import errno
import glob
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from explorer.errors import ExplorerError
from explorer.store.header import (
    HEADER,
    SourceStamp,
    StoreDamaged,
    map_checked,
    read_checked,
    read_header,
    source_matches,
    write_header,
)
from explorer.store.tables import (
    categories_of,
    decode_args,
    decode_table,
    encode_args,
    encode_table,
)
from explorer.trace.args_store import ArgsStore
from explorer.trace.model import TraceData

#: The model's tables, each stored as ``<name>.parquet``.
TABLES: tuple[str, ...] = ("slices", "tracks", "flows", "counters", "instants", "memory")
#: Optional tables (stored only when the trace has them).
OPTIONAL_TABLES: tuple[str, ...] = ("execution_trace",)
ARGS_FILE = "args.parquet"
METADATA_FILE = "metadata.json"


def _encode(model: TraceData) -> tuple[dict[str, bytes], dict[str, Any]]:
    files: dict[str, bytes] = {}
    categories: dict[str, Any] = {}
    tables = {t: getattr(model, t) for t in TABLES}
    if model.execution_trace is not None:
        tables["execution_trace"] = model.execution_trace
    for name, df in tables.items():
        files[f"{name}.parquet"] = encode_table(name, df)
        categories[name] = categories_of(df)
    files[ARGS_FILE] = encode_args(model.args_store, len(model.slices))
    files[METADATA_FILE] = json.dumps(model.metadata, default=_json_scalar).encode()
    return files, {"tables": sorted(tables), "categories": categories, "rows": len(model.slices)}


def _json_scalar(v: Any) -> Any:
    if isinstance(v, np.generic):  # a numpy scalar in metadata
        return v.item()
    raise TypeError(f"metadata value of type {type(v).__name__} cannot be stored")


def write_trace(
    model: TraceData, directory: str | os.PathLike[str], *, source: SourceStamp | None = None
) -> Path:
    """Write ``model``'s tables, args and metadata as a store entry at ``directory``.

    ``directory`` must not exist, or be a store entry (which is replaced atomically); its
    parent is created. ``source`` stamps the entry with the file the model was parsed from
    (take it with :meth:`SourceStamp.of` *before* reading that file). Returns the entry's
    path. Raises :class:`OSError` when the directory cannot be written, and
    :class:`~explorer.errors.ExplorerError` when ``directory`` is something other than a
    store entry (nothing of the user's is ever replaced).
    """
    target = Path(directory)
    files, extra = _encode(model)
    if target.exists() and not is_entry(target):
        raise ExplorerError(
            f"{target}: exists and is not an Explorer store entry — choose a new directory"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".writing", dir=target.parent))
    try:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        write_header(tmp, files, source, extra)  # last: an entry without it is incomplete
        _install(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already when installed
    return target


#: A temporary directory of an entry's writer older than this was left by a killed process.
STALE_TEMPORARY_S = 3600


def _remove_stale_temporaries(target: Path) -> None:
    """Remove what writers of ``target`` killed mid-write left (``.NAME.*.writing`` and
    ``.NAME.*.old`` directories); recent ones may belong to a writer still running."""
    cutoff = time.time() - STALE_TEMPORARY_S
    for p in target.parent.glob(f".{glob.escape(target.name)}.*"):
        if p.suffix in (".writing", ".old") and p.is_dir() and p.stat().st_mtime < cutoff:
            shutil.rmtree(p, ignore_errors=True)


def is_entry(path: Path) -> bool:
    """Whether ``path`` is a store entry directory (it has a header; not that it is intact)."""
    return path.is_dir() and not path.is_symlink() and (path / HEADER).is_file()


def _install(tmp: Path, target: Path) -> None:
    """Move the finished entry ``tmp`` to ``target``, replacing an older entry there."""
    for _ in range(5):  # another writer may be swapping the same entry at the same time
        if is_entry(target):
            aside = Path(
                tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent)
            )
            try:
                os.rename(target, aside / "entry")
            except FileNotFoundError:
                pass  # the other writer moved it first
            shutil.rmtree(aside, ignore_errors=True)
        elif target.exists():
            raise ExplorerError(
                f"{target}: exists and is not an Explorer store entry — choose a new directory"
            )
        try:
            os.rename(tmp, target)  # atomic; refuses a non-empty directory at target
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
    raise OSError(
        f"{target}: could not replace the store entry (another writer keeps replacing it)"
    )


def open_trace(
    directory: str | os.PathLike[str], *, source: SourceStamp | None = None
) -> TraceData:
    """The trace stored at ``directory`` by :func:`write_trace`.

    Every file is verified against the header before use; any damage, a missing file or
    another format version raises :class:`StoreDamaged` (never wrong data). With ``source``,
    the entry must have been made from exactly that file (else :class:`StoreDamaged`).
    """
    d = Path(directory)
    header = read_header(d)
    if source is not None and not source_matches(header, source):
        raise StoreDamaged(d, "made from another version of the trace file")
    categories = header.get("categories")
    names = header.get("tables")
    if not isinstance(categories, dict) or not isinstance(names, list):
        raise StoreDamaged(d, f"{HEADER} lists no tables")
    if not set(TABLES) <= set(names) <= set(TABLES + OPTIONAL_TABLES):
        raise StoreDamaged(d, f"{HEADER} lists unexpected tables {names}")
    raw = {name: map_checked(d, header, f"{name}.parquet") for name in names}
    args_bytes = read_checked(d, header, ARGS_FILE)
    meta_bytes = read_checked(d, header, METADATA_FILE)
    try:
        tables = {
            name: decode_table(name, data, categories.get(name, {})) for name, data in raw.items()
        }
        metadata = json.loads(meta_bytes)
    except (pa.ArrowException, ValueError, KeyError, TypeError) as exc:
        # Only reachable when damage kept the checksum (or the header was edited by hand).
        raise StoreDamaged(d, f"a table does not decode ({exc})") from exc
    if not isinstance(metadata, dict) or len(tables["slices"]) != header.get("rows"):
        raise StoreDamaged(d, "the tables do not match the header")
    return TraceData(
        **{t: tables[t] for t in TABLES},
        metadata=metadata,
        execution_trace=tables.get("execution_trace"),
        args_store=ArgsStore(load=lambda: decode_args(args_bytes)),
    )


def table_paths(directory: str | os.PathLike[str], *, verify: bool = True) -> dict[str, Path]:
    """The Parquet file of each table of the entry at ``directory`` (``slices``, ``tracks``,
    ``flows``, ``counters``, ``instants``, ``memory``, ``args``, and ``execution_trace`` when
    present), for DuckDB's ``read_parquet`` or any Parquet reader. With ``verify`` (the
    default) every file's checksum is checked first (:class:`StoreDamaged` when one fails)."""
    d = Path(directory)
    header = read_header(d)
    names = [n for n in header["files"] if n.endswith(".parquet")]
    if verify:
        for n in names:
            read_checked(d, header, n)
    return {n.removesuffix(".parquet"): d / n for n in sorted(names)}
