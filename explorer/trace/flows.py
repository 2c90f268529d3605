"""Flows between slices: launch → device op, forward → backward, and any other explicit
flow in the file.

Chrome flow events (``ph`` s/t/f) carry a time and a thread, not a slice: a flow start
binds to the slice enclosing its time on its thread, a flow end with ``bp: "e"`` to the
enclosing slice and otherwise to the next slice that starts. Launch flows are also derived
from correlation ids, which every profiler era writes even when it omits the flow events.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from explorer.trace.kinds import FLOW_CATEGORY_TYPES
from explorer.trace.nesting import after, enclosing

FLOW_TYPES = ["launch", "fwdbwd", "other"]
_HOST_LAUNCH_KINDS = ("runtime", "sync")


@dataclass
class FlowEvents:
    """The file's flow events (``s``, ``t``, ``f``), one entry per event."""

    is_start: np.ndarray
    is_end: np.ndarray
    cat_code: np.ndarray
    cat_values: Sequence[str]
    ids: np.ndarray
    bp_e: np.ndarray
    """An ``f`` with ``bp: "e"`` binds to the slice that encloses it, not the next one."""
    track: np.ndarray
    ts: np.ndarray


def build_flows(events: FlowEvents, slices: pd.DataFrame, ends: np.ndarray) -> pd.DataFrame:
    """The flows table: explicit flows from the file plus launches from correlation ids.

    Flow events are ``s`` (start), ``t`` (step) and ``f`` (end); a flow is the events that
    share a (category, id). Each start pairs with every later event of its flow. The
    file's own flows win over derived ones for the same (src, dst) pair; rows are sorted
    by (src, dst). Columns stay numpy arrays throughout (the types as small codes): at
    10M events a DataFrame concat, de-duplication and sort held several copies."""
    parts = [_launches_from_correlation(slices)]
    if len(events.ids):
        parts.insert(0, _explicit_flows(events, slices, ends))
    src, dst, type_code, flow_id = (np.concatenate(c) for c in zip(*parts, strict=True))
    del parts
    order = _by_src_then_dst(src, dst)
    src, dst = src[order], dst[order]
    first = np.ones(len(src), bool)
    first[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    keep = order[first]
    del order
    return pd.DataFrame(
        {
            "src": src[first],
            "dst": dst[first],
            "type": pd.Categorical.from_codes(type_code[keep], categories=FLOW_TYPES),
            "flow_id": flow_id[keep],
        }
    )


def _by_src_then_dst(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """``np.lexsort((dst, src))`` (stable: of equal pairs the first part's comes first):
    one stable sort of the pair packed in an int64 when both fit 31 bits (slice ids do),
    2.4x faster at 4M flows."""
    if len(src) == 0 or min(int(src.min()), int(dst.min())) < 0:
        return np.lexsort((dst, src))
    if max(int(src.max()), int(dst.max())) >= 2**31:
        return np.lexsort((dst, src))
    key = src.astype(np.int64) << 32
    key |= dst
    return np.argsort(key, kind="stable")


#: One part of the flows: (src, dst, type code into FLOW_TYPES, flow id).
_Part = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _explicit_flows(ev: FlowEvents, slices: pd.DataFrame, ends: np.ndarray) -> _Part:
    """The file's own flows: each flow's first start paired with its later events, each
    event bound to the slice that encloses it (or, for an ``f`` without ``bp: e``, the
    next slice that starts after it)."""
    is_start, is_end, cat_code, ids, bp_e, track, ts = (
        ev.is_start, ev.is_end, ev.cat_code, ev.ids, ev.bp_e, ev.track, ev.ts
    )  # fmt: skip
    cat_values = ev.cat_values
    s_track = slices["track"].to_numpy()
    s_ts = slices["ts"].to_numpy()
    parent = slices["parent"].to_numpy()
    bound = np.full(len(ids), -1, np.int64)
    ok = track >= 0
    enc_q = ok & (~is_end | bp_e)
    bound[enc_q] = enclosing(s_track, s_ts, ends, parent, track[enc_q], ts[enc_q])
    aft_q = ok & is_end & ~bp_e
    bound[aft_q] = after(s_track, s_ts, track[aft_q], ts[aft_q])
    key = _flow_keys(cat_code, ids)
    has = bound >= 0
    src_rows = np.flatnonzero(has & is_start)
    # The first start of each flow.
    first_key, first_at = np.unique(key[src_rows], return_index=True)
    src_rows = src_rows[first_at]
    dst_rows = np.flatnonzero(has & ~is_start)
    pos = np.searchsorted(first_key, key[dst_rows])
    pos_ok = pos < len(first_key)
    matched = np.zeros(len(dst_rows), bool)
    matched[pos_ok] = first_key[pos[pos_ok]] == key[dst_rows[pos_ok]]
    dst_rows = dst_rows[matched]
    src_of = src_rows[pos[matched]]
    src_slice, dst_slice = bound[src_of], bound[dst_rows]
    keep = src_slice != dst_slice
    codes = [FLOW_TYPES.index(FLOW_CATEGORY_TYPES.get(str(c).lower(), "other")) for c in cat_values]
    ftype = np.array([*codes, FLOW_TYPES.index("other")], np.int8)[cat_code[src_of[keep]]]
    return (
        src_slice[keep].astype(np.int64),
        dst_slice[keep].astype(np.int64),
        ftype,
        ids[src_of[keep]].astype(np.int64),
    )


def _flow_keys(cat_code: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """One int64 key per (category, id): equal pairs, equal keys. The category and the
    id's offset from the smallest packed side by side when they fit (flow ids are mostly
    correlation ids, well under 2^32), else the id's code from ``pd.factorize``, whose
    hash table ran 33x slower per id at 2M flows than at 0.2M (0.4 s)."""
    if len(ids) == 0:
        return np.empty(0, np.int64)
    lo, cat_lo = int(ids.min()), int(cat_code.min())
    id_bits = (int(ids.max()) - lo).bit_length()
    if id_bits + (int(cat_code.max()) - cat_lo).bit_length() <= 62:
        key = cat_code.astype(np.int64) - cat_lo
        key <<= id_bits
        key |= ids.astype(np.int64) - lo
        return key
    id_code, id_uniq = pd.factorize(ids)
    return cat_code.astype(np.int64) * max(len(id_uniq), 1) + id_code


def _launches_from_correlation(slices: pd.DataFrame) -> _Part:
    """Host runtime call → device op with the same correlation id."""
    corr = slices["correlation"].to_numpy()
    kind = slices["kind"]
    has = corr >= 0
    host = np.flatnonzero(
        has & np.asarray(kind.isin(_HOST_LAUNCH_KINDS)) & (slices["device"].to_numpy() < 0)
        | has & np.asarray(kind == "runtime")
    )
    dev_kinds = ("kernel", "memcpy", "memset", "collective", "sync", "device_annotation")
    device = np.flatnonzero(
        has & np.asarray(kind.isin(dev_kinds)) & (slices["device"].to_numpy() >= 0)
    )
    is_host = np.zeros(len(corr), bool)
    is_host[host] = True
    device = device[~is_host[device]]
    if len(host) == 0 or len(device) == 0:
        none = np.empty(0, np.int64)
        return none, none, np.empty(0, np.int8), none
    src, dst = _pairs_with_equal_keys(corr[host], host, corr[device], device)
    return (
        src,
        dst,
        np.full(len(src), FLOW_TYPES.index("launch"), np.int8),
        np.full(len(src), -1, np.int64),
    )


def _pairs_with_equal_keys(
    a_key: np.ndarray, a: np.ndarray, b_key: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Every ``(a[i], b[j])`` with ``a_key[i] == b_key[j]`` (an inner join, in no
    particular order), by sorting ``b_key`` and searching it: ``DataFrame.merge`` hashed
    the keys, 0.3 s at 10M events where its hash table no longer fit the CPU's caches."""
    order = np.argsort(b_key, kind="stable")
    sorted_key = b_key[order]
    lo = np.searchsorted(sorted_key, a_key, "left")
    count = np.searchsorted(sorted_key, a_key, "right") - lo
    total = int(count.sum())
    # the k-th pair of a[i] takes b's sorted position lo[i] + k
    first_pair = np.cumsum(count) - count
    at = np.repeat(lo - first_pair, count) + np.arange(total)
    return np.repeat(a, count).astype(np.int64), b[order[at]].astype(np.int64)
