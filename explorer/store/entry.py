"""Write a trace's tables as one store entry (a directory), and open one.

An entry is immutable: it is written complete into a hidden temporary directory beside its
final place, then moved there by rename, so a reader sees the old entry, no entry, or the
new one, never a half-written one; Ctrl-C is held back from the temporary directory's
creation to its rename or removal, so an interrupted write leaves nothing behind. Opening
maps every file read-only and verifies its bytes (size and checksum from the header)
before decoding any; the args stay in their mapping, a slice's args read from it when first
asked for. Entries are renamed and unlinked, never rewritten in place, so a mapping keeps
what was verified: another process replacing the entry cannot change what an open trace
sees.

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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from explorer.errors import ExplorerError
from explorer.processes import interrupts_deferred
from explorer.store.header import (
    HEADER,
    METADATA_FILE,
    SourceStamp,
    StoreDamaged,
    file_size_and_checksum,
    map_checked,
    read_checked,
    read_header,
    read_metadata,
    source_matches,
    write_header,
)
from explorer.store.tables import (
    ARGS_FILES,
    TABLE_FORMATS,
    categories_of,
    decode_table,
    encode_args,
    encode_table,
    open_args,
)
from explorer.trace.model import TraceData

#: The model's tables, each stored as ``<name>.parquet``.
TABLES: tuple[str, ...] = ("slices", "tracks", "flows", "counters", "instants", "memory")
#: Optional tables (stored only when the trace has them).
OPTIONAL_TABLES: tuple[str, ...] = ("execution_trace",)


def _write_files(
    model: TraceData,
    table_format: str,
    extra_tables: Mapping[str, pd.DataFrame],
    directory: Path,
) -> dict[str, tuple[int, int]]:
    """Write every file of the entry but the header into ``directory``, each straight to
    its file (holding the encoded files in memory would cost the tables' size again at the
    peak of a first load); ``{file name: (size, checksum)}``."""
    suffix = TABLE_FORMATS[table_format]
    tables = {t: getattr(model, t) for t in TABLES}
    if model.execution_trace is not None:
        tables["execution_trace"] = model.execution_trace
    (directory / METADATA_FILE).write_bytes(_metadata_bytes(model.metadata))
    for name, df in {**tables, **extra_tables}.items():
        with pa.OSFile(str(directory / (name + suffix)), "wb") as sink:
            encode_table(name, df, sink, table_format)
    with pa.OSFile(str(directory / ARGS_FILES[table_format]), "wb") as sink:
        encode_args(model.args_store, len(model.slices), sink, table_format)
    return {p.name: file_size_and_checksum(p) for p in sorted(directory.iterdir())}


def _metadata_bytes(metadata: dict[str, Any]) -> bytes:
    data = json.dumps(metadata, default=_json_scalar).encode()
    if json.loads(data) != metadata:  # a tuple, a non-str key, a NaN
        raise ExplorerError("the trace's metadata does not survive JSON; it cannot be stored")
    return data


def _header_extra(
    model: TraceData, table_format: str, extra_tables: Mapping[str, pd.DataFrame]
) -> dict[str, Any]:
    tables = [*TABLES, *(["execution_trace"] if model.execution_trace is not None else [])]
    categories = {t: categories_of(getattr(model, t)) for t in tables}
    categories.update({t: categories_of(df) for t, df in extra_tables.items()})
    return {
        "tables": sorted(tables),
        "categories": categories,
        "rows": len(model.slices),
        "extra_tables": sorted(extra_tables),
        "table_format": table_format,
    }


def _json_scalar(v: Any) -> Any:
    if isinstance(v, np.generic):  # a numpy scalar in metadata
        return v.item()
    raise TypeError(f"metadata value of type {type(v).__name__} cannot be stored")


def write_trace(
    model: TraceData,
    directory: str | os.PathLike[str],
    *,
    source: SourceStamp | None = None,
    table_format: str = "parquet",
    extra_tables: Mapping[str, pd.DataFrame] | None = None,
) -> Path:
    """Write ``model``'s tables, args and metadata as a store entry at ``directory``.

    Tables are Parquet files (``table_format="parquet"``, for DuckDB and other tools) or
    Arrow IPC files (``"arrow"``: memory-mapped, no decoding on open; what the trace cache
    uses); the args likewise (``args.parquet`` or ``args.arrow``), written
    :data:`~explorer.store.tables.ARGS_BATCH` slices at a time. ``extra_tables`` are stored beside the model's
    tables in the same format (e.g. a rank's ``steps`` and ``findings`` in a job store; read
    one back with :func:`read_table`, or all through :func:`table_paths`).

    ``directory`` must not exist, or be a store entry (which is replaced atomically); its
    parent is created. ``source`` stamps the entry with the file the model was parsed from
    (take it with :meth:`SourceStamp.of` *before* reading that file). Returns the entry's
    path. Raises :class:`OSError` when the directory cannot be written, and
    :class:`~explorer.errors.ExplorerError` when ``directory`` is something other than a
    store entry (nothing of the user's is ever replaced).
    """
    if table_format not in TABLE_FORMATS:
        raise ValueError(f"table_format must be one of {sorted(TABLE_FORMATS)}")
    reserved = set(TABLES) | set(OPTIONAL_TABLES) | {"args", "metadata", "header"}
    clash = reserved & set(extra_tables or {})
    if clash:
        raise ValueError(f"extra table names {sorted(clash)} are the model's own")
    target = Path(directory)
    extra_tables = extra_tables or {}
    _metadata_bytes(model.metadata)  # refused before anything is written
    extra = _header_extra(model, table_format, extra_tables)
    if target.exists() and not is_entry(target):
        raise ExplorerError(
            f"{target}: exists and is not an Explorer store entry — choose a new directory"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(target)
    with interrupts_deferred():  # a Ctrl-C lands once the entry is installed or removed
        tmp = Path(
            tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".writing", dir=target.parent)
        )
        try:
            files = _write_files(model, table_format, extra_tables, tmp)
            write_header(tmp, files, source, extra)  # last: an entry without it is incomplete
            _install(tmp, target)
        except MemoryError:
            raise ExplorerError(
                f"{target}: not enough memory to write this store entry — free memory, or "
                "load without the cache (use_cache=False)"
            ) from None
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
        try:
            stale = p.suffix in (".writing", ".old") and p.is_dir() and p.stat().st_mtime < cutoff
        except FileNotFoundError:  # another writer removed it meanwhile
            continue
        if stale:
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
    d, header, table_format = open_header(directory)
    if source is not None and not source_matches(header, source):
        raise StoreDamaged(d, "made from another version of the trace file")
    categories = header.get("categories")
    names = header.get("tables")
    if not isinstance(categories, dict) or not isinstance(names, list):
        raise StoreDamaged(d, f"{HEADER} lists no tables")
    if not set(TABLES) <= set(names) <= set(TABLES + OPTIONAL_TABLES):
        raise StoreDamaged(d, f"{HEADER} lists unexpected tables {names}")
    raw = {name: map_checked(d, header, name + TABLE_FORMATS[table_format]) for name in names}
    args_data = map_checked(d, header, ARGS_FILES[table_format])
    meta_bytes = read_checked(d, header, METADATA_FILE)
    try:
        tables = {
            name: decode_table(name, data, categories.get(name, {}), table_format)
            for name, data in raw.items()
        }
        args = open_args(args_data, table_format)
        metadata = json.loads(meta_bytes)
    except MemoryError:  # Arrow's too: the process's limit, not damage (see header)
        raise
    except (pa.ArrowException, ValueError, KeyError, TypeError) as exc:
        # Only reachable when damage kept the checksum (or the header was edited by hand).
        raise StoreDamaged(d, f"a table does not decode ({exc})") from exc
    rows = header.get("rows")
    if not isinstance(metadata, dict) or not len(tables["slices"]) == len(args) == rows:
        raise StoreDamaged(d, "the tables do not match the header")
    return TraceData(
        **{t: tables[t] for t in TABLES},
        metadata=metadata,
        execution_trace=tables.get("execution_trace"),
        args_store=args,
    )


def open_header(directory: str | os.PathLike[str]) -> tuple[Path, dict[str, Any], str]:
    """The entry at ``directory``: its path, its checked header and the table format the
    header names (a key of ``TABLE_FORMATS``), or :class:`StoreDamaged` — one check for
    every reader of an entry."""
    d = Path(directory)
    header = read_header(d)
    table_format = header.get("table_format")
    if table_format not in TABLE_FORMATS:
        raise StoreDamaged(d, f"unknown table format {table_format!r}")
    return d, header, str(table_format)


def read_table(directory: str | os.PathLike[str], name: str) -> pd.DataFrame:
    """One table of the entry at ``directory`` (a model table or an extra table), verified
    against the header and with its categories restored; :class:`StoreDamaged` otherwise."""
    d, header, table_format = open_header(directory)
    categories = header.get("categories")
    if not isinstance(categories, dict):
        raise StoreDamaged(d, f"{HEADER} lists no table categories")
    data = map_checked(d, header, name + TABLE_FORMATS[table_format])
    try:
        return decode_table(name, data, categories.get(name, {}), table_format)
    except MemoryError:  # Arrow's too: the process's limit, not damage (see header)
        raise
    except (pa.ArrowException, ValueError, KeyError, TypeError) as exc:
        raise StoreDamaged(d, f"{name} does not decode ({exc})") from exc


def entry_warnings(directory: str | os.PathLike[str]) -> list[str]:
    """The warnings the load of an entry's trace gave (a cut, a guessed value), read from
    its metadata without opening its tables; :class:`StoreDamaged` when it is damaged."""
    d = Path(directory)
    warnings = read_metadata(d, read_header(d)).get("warnings")
    return [str(w) for w in warnings] if isinstance(warnings, list) else []


def table_paths(directory: str | os.PathLike[str], *, verify: bool = True) -> dict[str, Path]:
    """The file of each table of the entry at ``directory`` (``slices``, ``tracks``,
    ``flows``, ``counters``, ``instants``, ``memory``, ``args``, and ``execution_trace`` when
    present): Parquet files for DuckDB's ``read_parquet`` or any Parquet reader (Arrow IPC
    files, ``.arrow``, for the tables of an entry written with ``table_format="arrow"``).
    With ``verify`` (the default) every file's checksum is checked first
    (:class:`StoreDamaged` when one fails)."""
    d = Path(directory)
    header = read_header(d)
    names = [n for n in header["files"] if n.endswith(tuple(TABLE_FORMATS.values()))]
    if verify:
        for n in names:
            read_checked(d, header, n)
    return {n.rsplit(".", 1)[0]: d / n for n in sorted(names)}
