"""Where a stored analysis result lives in a store entry, and reading one made of plain
values — with the standard library only.

:mod:`explorer.store.results` keeps results (frames, arrays, dataclasses) beside an entry's
tables; this module is the part of it that needs neither numpy, pandas nor Arrow: the
digest a result is filed under, and the reading of a result that is a tree of plain values
(a report's whole document). A repeat ``explorer report`` finds its document with it
before importing the analyses, so it answers in the time Python takes to start.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from explorer.store.header import checksum

#: Bump when how a result is written changes (the analyses' own changes are caught by the
#: digest of their source).
RESULTS_VERSION = 2
RESULTS_DIR = "results"
VALUE_FILE = "value.json"
#: The result's shape and plain values, with its size and CRC-32 in :data:`VALUE_FILE`
#: (a report's whole document is such a tree: one flipped byte must not read back).
TREE_FILE = "tree.json"

_code_digest: str | None = None


def code_digest() -> str:
    """A digest of the analysis code's source (and the report's, which stores its
    document): a stored result is only read by the code that wrote it. Computed once per
    process (~1 MB of source)."""
    global _code_digest
    if _code_digest is None:
        root = Path(__file__).resolve().parents[1]
        h = hashlib.sha1()
        for sub in ("analysis", "trace", "report"):
            for p in sorted((root / sub).rglob("*.py")):
                h.update(str(p.relative_to(root)).encode())
                h.update(p.read_bytes())
        _code_digest = h.hexdigest()
    return _code_digest


def tables_digest(header: dict[str, Any]) -> str:
    """What identifies an entry's tables: their files' checksums and the source stamp, as
    its header lists them (a re-parsed trace is a new entry with new files)."""
    return hashlib.sha1(
        json.dumps([header.get("files"), header.get("source")], sort_keys=True).encode()
    ).hexdigest()


def plain_options(options: Hashable) -> bool:
    """Whether ``options`` is made of plain values only (its ``repr`` is then a stable key)."""
    if options is None or isinstance(options, (bool, int, float, str)):
        return True
    if isinstance(options, tuple):
        return all(plain_options(o) for o in options)
    return False


def result_digest(
    tables: str, name: str, options: Hashable, step_pattern: str | None, step_nesting: str
) -> str:
    """The name of result ``name``'s directory under an entry's :data:`RESULTS_DIR`: a
    digest of everything it was computed from (see :mod:`explorer.store.results`)."""
    key = [
        RESULTS_VERSION,
        code_digest(),
        tables,
        name,
        repr(options),
        step_pattern,
        step_nesting,
    ]
    return hashlib.sha1(json.dumps(key).encode()).hexdigest()[:32]


def read_checked_file(path: Path, meta: dict[str, Any]) -> bytes:
    """The bytes of ``path``, when its size and CRC-32 are those listed (else ValueError)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) != meta["bytes"] or checksum(data) != meta["crc32"]:
        raise ValueError(f"{path} is damaged")
    return data


def read_value(directory: Path, name: str) -> tuple[Any, list[dict[str, Any]]]:
    """The tree of the result stored in ``directory`` and the files it lists (their size
    and CRC-32), each checked; ValueError or OSError when it is not ``name``'s or damaged."""
    doc = json.loads((directory / VALUE_FILE).read_bytes())
    if not isinstance(doc, dict) or doc.get("name") != name:
        raise ValueError(f"{directory} holds another result")
    tree = json.loads(read_checked_file(directory / TREE_FILE, doc["tree"]))
    files = doc.get("files", [])
    if not isinstance(files, list):
        raise ValueError(f"{directory} lists no files")
    return tree, files


def read_plain(directory: Path, name: str) -> Any | None:
    """Result ``name`` stored in ``directory`` when it is made of plain values only (dicts,
    lists, tuples, strings, numbers, None), else None: absent, damaged, another result, or
    one with arrays or frames (:mod:`explorer.store.results` reads those)."""
    try:
        tree, files = read_value(directory, name)
        if files:
            return None
        return decode_tree(tree)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def decode_tree(v: Any, tagged: Callable[[dict[str, Any]], Any] | None = None) -> Any:
    """A stored tree as the value it was written from: plain values and their containers
    here, every other tagged node by ``tagged`` (the full codec's arrays, frames and
    dataclasses; without it, ValueError)."""
    if not isinstance(v, dict):
        return v
    tag = v["~"]
    if tag == "list":
        return [decode_tree(x, tagged) for x in v["v"]]
    if tag == "tuple":
        return tuple(decode_tree(x, tagged) for x in v["v"])
    if tag == "dict":
        return {
            decode_tree(k, tagged): decode_tree(x, tagged)
            for k, x in zip(v["k"], v["v"], strict=True)
        }
    if tagged is None:
        raise ValueError(f"not a plain value: {tag!r}")
    return tagged(v)
