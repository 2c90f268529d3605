"""The args shown when a slice is selected in Perfetto: debug annotations on its begin
packet, built per column rather than per slice.

What a person needs to answer "what is this and where did it come from": its kind, the
ids that tie host and device together (correlation, External id, autograd sequence
number), bytes and direction of copies, the input shapes and dtypes of operators, and the
user source line responsible (host ops through their Python stack, device ops through the
call that launched them). Names and repeated string values are interned, so each
annotation costs a few bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from itertools import chain
from typing import Any

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from explorer.analysis.attribution import frame_codes
from explorer.export import protowire as w
from explorer.trace.args_store import binary_parts
from explorer.trace.model import TraceData

#: Args copied from the file for the slices that have them (shapes and dtypes of operator
#: inputs, kernel launch geometry, collective sizes). Values are kept as their JSON text.
SHAPE_ARGS: tuple[str, ...] = (
    "Input Dims",
    "Input type",
    "Concrete Inputs",
    "grid",
    "block",
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "Group size",
    "dtype",
)


#: The type of interned-string ids kept per slice (a trace interns far fewer than 2**31).
IID = np.int32


class StringTable:
    """Interned debug-annotation string values: iid ``k`` is ``values[k - 1]``."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self._iid: dict[str, int] = {}

    def iid(self, s: str) -> int:
        if s not in self._iid:
            self.values.append(s)
            self._iid[s] = len(self.values)
        return self._iid[s]

    def iids(self, column: pd.Series | np.ndarray) -> np.ndarray:
        """iid of every row (0 where missing), looked up once per distinct value."""
        col = pd.Series(column)
        if col.dtype.name == "category":
            codes, uniques = col.cat.codes.to_numpy(), col.cat.categories
        else:
            codes, uniques = pd.factorize(col, use_na_sentinel=True)
        table = np.array([self.iid(str(u)) for u in uniques] + [0], IID)
        return table[codes]


@dataclass
class _Column:
    name_iid: int
    string: bool  # value is an interned string iid, else an int64
    values: np.ndarray
    present: np.ndarray


@dataclass
class Annotations:
    """Debug annotations for every slice, column by column."""

    names: list[str] = field(default_factory=list)
    columns: list[_Column] = field(default_factory=list)

    def add(self, name: str, values: np.ndarray, present: np.ndarray, *, string: bool) -> None:
        present = np.asarray(present, bool)
        if not present.any():
            return
        if name not in self.names:
            self.names.append(name)
        iid = self.names.index(name) + 1
        values = np.asarray(values)  # iids stay int32: 4 bytes a slice, not 8, per column
        if not np.issubdtype(values.dtype, np.integer):
            values = values.astype(np.int64)
        self.columns.append(_Column(iid, string, values, present))

    def encode(self, sid: np.ndarray, present: np.ndarray) -> list[w.Part]:
        """``debug_annotations`` fields of packets for slices ``sid`` (where ``present``):
        one part each, holding the field's tag and length, the name iid and the value."""
        out = []
        for c in self.columns:
            have = present & c.present[sid] if len(sid) else present
            if not have.any():
                continue
            value_field = 17 if c.string else 4  # string_value_iid / int_value
            head = w.tag(1, w.VARINT) + w.varint_bytes(c.name_iid)
            inner = w.field_varint(value_field, c.values[sid], have, prefix=head)
            out.append(w.message_part(4, inner))
        return out


def slice_annotations(trace: TraceData, strings: StringTable) -> Annotations:
    """Every annotation column of ``trace``'s slices."""
    ann = Annotations()
    sl = trace.slices
    if len(sl) == 0:
        return ann
    ann.add("kind", strings.iids(sl["kind"]), np.ones(len(sl), bool), string=True)
    for col, label in (
        ("correlation", "correlation"),
        ("external_id", "External id"),
        ("seq", "Sequence number"),
        ("bytes", "bytes"),
    ):
        v = sl[col].to_numpy(np.int64)
        ann.add(label, v, v >= 0, string=False)
    for label, (codes, texts) in (("copy", _copy_texts(sl)), ("source", _source_texts(trace))):
        values = _iids_by_code(codes, texts, strings)
        ann.add(label, values, values > 0, string=True)
    for name, (codes, uniques) in _shape_args(trace).items():
        table = np.array([strings.iid(u) for u in uniques] + [0], IID)
        ann.add(name, table[codes], codes >= 0, string=True)
    return ann


def _copy_texts(sl: pd.DataFrame) -> tuple[np.ndarray, list[str | None]]:
    """``"HtoD (Pageable → Device)"`` for copies, missing elsewhere: a code per slice into
    texts formatted once per distinct (direction, source, destination)."""
    cols = [sl[c].astype("category") for c in ("copy_kind", "src_mem", "dst_mem")]
    key = np.zeros(len(sl), np.int64)
    for col in cols:  # one int per combination of the three codes (-1: missing, kept)
        key = key * (len(col.cat.categories) + 1) + col.cat.codes.to_numpy(np.int64) + 1
    codes, uniques = pd.factorize(key)
    texts = []
    for u in uniques:
        k, s, d = _decode_key(int(u), cols)
        texts.append((f"{k} ({s} → {d})" if s or d else str(k)) if str(k) else None)
    return codes, texts


def _decode_key(key: int, cols: list[pd.Series]) -> list[Any]:
    """The column values (NaN for missing) a key of :func:`_copy_texts` stands for."""
    out: list[Any] = []
    for col in reversed(cols):
        key, code = divmod(key, len(col.cat.categories) + 1)
        out.append(col.cat.categories[code - 1] if code else np.nan)
    return out[::-1]


def _source_texts(trace: TraceData) -> tuple[np.ndarray, list[str | None]]:
    """``file:line (function)`` of the user code behind each slice, missing when unknown:
    a frame code per slice into texts formatted once per frame."""
    code, frames = frame_codes(trace)
    texts = [
        f"{f}:{int(ln)} ({fn_})" if str(f) else None
        for f, ln, fn_ in frames[["file", "line", "function"]].itertuples(index=False)
    ]
    return code, texts


def _iids_by_code(codes: np.ndarray, texts: list[str | None], strings: StringTable) -> np.ndarray:
    """Per row, the iid of ``texts[codes[row]]`` (0 where the code is -1 or the text None),
    iids given in the order the texts first appear over the rows — never a string per row."""
    table = np.zeros(len(texts) + 1, IID)  # the last entry: code -1
    for c in pd.unique(codes):
        t = texts[c] if c >= 0 else None
        if t is not None:
            table[c] = strings.iid(t)
    return table[codes]


def _shape_args(trace: TraceData) -> dict[str, tuple[np.ndarray, list[str]]]:
    """The :data:`SHAPE_ARGS` of every slice that has them, as JSON text: per key, each
    slice's code into a list of distinct values (-1 where the slice lacks the key), keys
    in the order they first appear.

    Read :data:`ARGS_CHUNK` slices' args at a time (:func:`_chunk_shape_args`); codes are
    made per chunk by Arrow and joined here through the few distinct values.
    """
    n = len(trace.slices)
    store = trace.args_store
    if store is None or n == 0 or len(store) != n:
        return {}
    codes: dict[str, np.ndarray] = {}
    distinct: dict[str, dict[bytes, int]] = {}
    for lo, rows in store.slice_batches(ARGS_CHUNK):
        for key, (where, chunk_codes, uniques) in _chunk_shape_args(rows).items():
            seen = distinct.setdefault(key, {})
            if key not in codes:
                codes[key] = np.full(n, -1, np.int32)
            to_global = np.array([seen.setdefault(u, len(seen)) for u in uniques], np.int32)
            codes[key][lo + where] = to_global[chunk_codes]
    return {
        key: (codes[key], [u.decode("utf-8", "replace") for u in distinct[key]]) for key in codes
    }


#: Slices whose args :func:`_shape_args` reads at a time.
ARGS_CHUNK = 1 << 16


def _chunk_shape_args(rows: pa.Array) -> dict[str, tuple[np.ndarray, np.ndarray, list[bytes]]]:
    """Per key of :data:`SHAPE_ARGS` some row of ``rows`` (a ``large_binary`` array of
    args JSON) has, in that order: the positions of those rows, and each one's code into
    the key's distinct raw JSON values in the order they first appear.

    A regex finds the rows that mention a key; only those are decoded, in one msgspec
    call, into a struct of just the keys their text holds, each kept as raw JSON — never a
    Python dict per slice. The values' texts are then joined into one Arrow array (their
    lengths the only per-value Python step) and coded by Arrow's hash table: ``bytes`` of
    each value, hashed by pandas, took twice as long.
    """
    # the rows that mention a key, by Arrow's regex engine in one pass over the chunk
    # (Python's re over the bytes, a match at a time, took twice as long)
    mentions = pc.fill_null(pc.match_substring_regex(rows, _KEY_PATTERN), False)
    rows_with = np.flatnonzero(mentions.to_numpy(zero_copy_only=False))
    if len(rows_with) == 0:
        return {}
    # those rows' JSON, comma-joined by Arrow (no Python slice per row), as one array
    taken = rows.take(pa.array(rows_with))
    one_list = pa.LargeListArray.from_arrays(pa.array([0, len(taken)], pa.int64()), taken)
    joined = pc.binary_join(one_list, pa.scalar(b",", pa.large_binary()))
    data, offsets = binary_parts(joined)
    text = b"[" + data[offsets[0] : offsets[1]] + b"]"
    # a key the text never mentions is no field to fill for every row
    keys = tuple(k for k, quoted in zip(SHAPE_ARGS, _QUOTED, strict=True) if quoted in text)
    if not keys:
        return {}
    try:
        decoded = _decoder(keys).decode(text)
    except msgspec.DecodeError:
        return {}
    # row-major (row, key) raw values; an absent key is the empty text
    flat = list(chain.from_iterable(map(msgspec.structs.astuple, decoded)))
    lengths = np.fromiter(map(len, flat), np.int64, len(flat))
    ends = np.zeros(len(flat) + 1, np.int64)
    np.cumsum(lengths, out=ends[1:])
    values = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(flat), [None, pa.py_buffer(ends), pa.py_buffer(b"".join(flat))]
    )
    coded = pc.dictionary_encode(values)
    value_code = coded.indices.to_numpy().reshape(-1, len(keys))
    lengths = lengths.reshape(-1, len(keys))
    out = {}
    for k, key in enumerate(keys):
        has = lengths[:, k] > 0
        if has.any():
            chunk_codes, firsts = pd.factorize(value_code[has, k])
            uniques = coded.dictionary.take(pa.array(firsts)).to_pylist()
            out[key] = (rows_with[has], chunk_codes, uniques)
    return out


#: A key of :data:`SHAPE_ARGS` as JSON text (an RE2 pattern: Arrow's regex engine).
_KEY_PATTERN = '"(?:' + "|".join(re.escape(k) for k in SHAPE_ARGS) + ')"'
_QUOTED = tuple(f'"{k}"'.encode() for k in SHAPE_ARGS)


@cache
def _decoder(keys: tuple[str, ...]) -> msgspec.json.Decoder[Any]:
    """A decoder of a JSON list of objects into structs of just ``keys``, each kept as raw
    JSON (the empty text where an object lacks it)."""
    struct = msgspec.defstruct(
        "_ShapeArgs",
        [
            (f"a{i}", msgspec.Raw, msgspec.field(default=msgspec.Raw(b""), name=key))
            for i, key in enumerate(keys)
        ],
        gc=False,
    )
    # A struct made at run time (its fields come from SHAPE_ARGS) is not a static type.
    return msgspec.json.Decoder(list[struct])  # type: ignore[valid-type]
