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

from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter

import msgspec
import numpy as np
import pandas as pd

from explorer.export import protowire as w
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
        """iid of every row, looked up once per distinct value."""
        codes, uniques = pd.factorize(pd.Series(column), use_na_sentinel=True)
        table = np.array([self.iid(str(u)) for u in uniques] + [0], np.int64)
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
        self.columns.append(_Column(iid, string, np.asarray(values, np.int64), present))

    def encode(self, sid: np.ndarray, present: np.ndarray) -> list[w.Block]:
        """``debug_annotations`` fields of packets for slices ``sid`` (where ``present``)."""
        out = []
        for c in self.columns:
            have = present & c.present[sid] if len(sid) else present
            if not have.any():
                continue
            head = w.tag(1, w.VARINT) + w.varint_bytes(c.name_iid)
            value_field = 17 if c.string else 4  # string_value_iid / int_value
            inner = w.join(w.constant(head, have), w.field_varint(value_field, c.values[sid], have))
            out.append(w.field_message(4, inner, have))
        return out


def slice_annotations(trace: TraceData, strings: StringTable) -> Annotations:
    """Every annotation column of ``trace``'s slices."""
    ann = Annotations()
    sl = trace.slices
    if len(sl) == 0:
        return ann
    ann.add("kind", strings.iids(sl["kind"].astype(str)), np.ones(len(sl), bool), string=True)
    for col, label in (
        ("correlation", "correlation"),
        ("external_id", "External id"),
        ("seq", "Sequence number"),
        ("bytes", "bytes"),
    ):
        v = sl[col].to_numpy(np.int64)
        ann.add(label, v, v >= 0, string=False)
    copy_kind = sl["copy_kind"].astype(str)
    has_copy = (copy_kind != "").to_numpy()
    if has_copy.any():
        text = (
            copy_kind + " (" + sl["src_mem"].astype(str) + " → " + sl["dst_mem"].astype(str) + ")"
        )
        text = text.where(~sl["src_mem"].astype(str).eq("").to_numpy(), copy_kind)
        ann.add("copy", strings.iids(text.where(has_copy)), has_copy, string=True)
    source = _source_lines(trace)
    if source is not None:
        has = (source != "").to_numpy()
        ann.add("source", strings.iids(source.where(has)), has, string=True)
    for name, values in _shape_args(trace).items():
        has = values.notna().to_numpy()
        ann.add(name, strings.iids(values), has, string=True)
    return ann


def _source_lines(trace: TraceData) -> pd.Series | None:
    """``file:line (function)`` of the user code behind each slice, "" when unknown."""
    frames = None
    fn = _optional_function("explorer.analysis.attribution", "slice_sources")
    if fn is None:
        fn = _optional_function("explorer.trace.source", "user_frames")
    if fn is None:
        return None
    frames = fn(trace)
    if frames is None or len(frames) != len(trace.slices):
        return None
    file = frames["file"].astype(str).reset_index(drop=True)
    line = frames["line"].astype(np.int64).astype(str).reset_index(drop=True)
    function = frames["function"].astype(str).reset_index(drop=True)
    text = file + ":" + line + " (" + function + ")"
    return text.where(file != "", "")


def _optional_function(module: str, attr: str) -> Callable[..., pd.DataFrame] | None:
    import importlib

    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            return None
        raise
    return getattr(mod, attr, None)


def _shape_args(trace: TraceData) -> dict[str, pd.Series]:
    """The :data:`SHAPE_ARGS` of every slice that has args, as JSON text (NaN if absent).

    One msgspec call decodes the args of all slices at once into a struct that keeps only
    these keys (as raw JSON, never building the other values), so the cost is one pass of
    C over the bytes rather than a Python dict per slice.
    """
    store = trace.args_store
    n = len(trace.slices)
    if store is None or n == 0 or not hasattr(store, "to_blob"):
        return {}
    blob, offsets = store.to_blob()
    if len(offsets) != n + 1:
        return {}
    wanted = [
        (key, attr)
        for key, attr in zip(SHAPE_ARGS, _ARG_FIELDS, strict=True)
        if blob.find(b'"' + key.encode() + b'"') >= 0
    ]
    if not wanted:
        return {}
    lens = np.diff(offsets)
    data = np.frombuffer(blob, np.uint8)
    comma = np.full(n, ord(","), np.uint8)
    joined = w.interleave(data, lens, comma, np.ones(n, np.int64))
    array = b"[" + joined[:-1].tobytes() + b"]"
    try:
        rows = _ARGS_DECODER.decode(array)
    except msgspec.DecodeError:
        return {}
    out: dict[str, pd.Series] = {}
    for key, attr in wanted:
        raw = pd.Series(list(map(bytes, map(attrgetter(attr), rows))), dtype=object)
        codes, uniques = pd.factorize(raw)
        text = np.array(
            [u.decode("utf-8", "replace") if u else None for u in uniques] + [None], object
        )
        values = pd.Series(text[codes], dtype=object)
        if values.notna().any():
            out[key] = values
    return out


_ABSENT = msgspec.Raw(b"")
_ARG_FIELDS = tuple(f"a{i}" for i in range(len(SHAPE_ARGS)))
_ShapeArgs = msgspec.defstruct(
    "_ShapeArgs",
    [
        (attr, msgspec.Raw, msgspec.field(default=_ABSENT, name=key))
        for attr, key in zip(_ARG_FIELDS, SHAPE_ARGS, strict=True)
    ],
    gc=False,
)
_ARGS_DECODER = msgspec.json.Decoder(list[_ShapeArgs])
