"""Flows between slices: launch → device op, forward → backward, and any other explicit
flow in the file.

Chrome flow events (``ph`` s/t/f) carry a time and a thread, not a slice: a flow start
binds to the slice enclosing its time on its thread, a flow end with ``bp: "e"`` to the
enclosing slice and otherwise to the next slice that starts. Launch flows are also derived
from correlation ids, which every profiler era writes even when it omits the flow events.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from explorer.trace.nesting import after, enclosing

FLOW_TYPES = ["launch", "fwdbwd", "other"]
_LAUNCH_CATS = {"ac2g", "async_gpu", "async_cpu_to_gpu"}
_HOST_LAUNCH_KINDS = ("runtime", "sync")


def empty_flows() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "src": np.empty(0, np.int64),
            "dst": np.empty(0, np.int64),
            "type": pd.Categorical([], categories=FLOW_TYPES),
            "flow_id": np.empty(0, np.int64),
        }
    )


def build_flows(
    ph: np.ndarray,
    cats: Sequence[str],
    ids: Sequence[str],
    bps: Sequence[str],
    track: np.ndarray,
    ts: np.ndarray,
    slices: pd.DataFrame,
    ends: np.ndarray,
) -> pd.DataFrame:
    """The flows table: explicit flows from the file plus launches from correlation ids."""
    s_track = slices["track"].to_numpy()
    s_ts = slices["ts"].to_numpy()
    parent = slices["parent"].to_numpy()
    parts = []
    if len(ph):
        bp_e = np.array([b == "e" for b in bps], bool)
        is_end = ph == "f"
        bound = np.full(len(ph), -1, np.int64)
        ok = track >= 0
        enc_q = ok & (~is_end | bp_e)
        bound[enc_q] = enclosing(s_track, s_ts, ends, parent, track[enc_q], ts[enc_q])
        aft_q = ok & is_end & ~bp_e
        bound[aft_q] = after(s_track, s_ts, track[aft_q], ts[aft_q])
        df = pd.DataFrame({"cat": list(cats), "id": list(ids), "ph": ph, "slice": bound})
        df = df[df["slice"] >= 0]
        src = df[df["ph"] == "s"].drop_duplicates(["cat", "id"])
        dst = df[df["ph"] != "s"]
        pairs = src.merge(dst, on=["cat", "id"], suffixes=("_s", "_d"))
        pairs = pairs[pairs["slice_s"] != pairs["slice_d"]]
        if len(pairs):
            cat = pairs["cat"].str.lower()
            ftype = np.where(
                cat.isin(_LAUNCH_CATS), "launch", np.where(cat == "fwdbwd", "fwdbwd", "other")
            )
            fid = pd.to_numeric(pairs["id"], errors="coerce").fillna(-1).astype(np.int64)
            parts.append(
                pd.DataFrame(
                    {
                        "src": pairs["slice_s"].to_numpy(np.int64),
                        "dst": pairs["slice_d"].to_numpy(np.int64),
                        "type": ftype,
                        "flow_id": fid.to_numpy(),
                    }
                )
            )
    parts.append(_launches_from_correlation(slices))
    flows = pd.concat(parts, ignore_index=True) if parts else empty_flows()
    flows = flows.drop_duplicates(["src", "dst"], keep="first")
    flows = flows.sort_values(["src", "dst"], kind="stable", ignore_index=True)
    flows["type"] = pd.Categorical(flows["type"].astype(str), categories=FLOW_TYPES)
    return flows


def _launches_from_correlation(slices: pd.DataFrame) -> pd.DataFrame:
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
    device = np.setdiff1d(device, host)
    if len(host) == 0 or len(device) == 0:
        return empty_flows()
    h = pd.DataFrame({"c": corr[host], "src": host})
    d = pd.DataFrame({"c": corr[device], "dst": device})
    m = h.merge(d, on="c")
    return pd.DataFrame(
        {
            "src": m["src"].to_numpy(np.int64),
            "dst": m["dst"].to_numpy(np.int64),
            "type": "launch",
            "flow_id": np.full(len(m), -1, np.int64),
        }
    )
