"""Data dependencies from a PyTorch Execution Trace: the op that wrote a tensor -> each op
that later read it. Only ops the trace matched to timeline slices take part."""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.analysis.graph.edges import END, START, EdgeList
from explorer.analysis.graph.nodes import SliceArrays


def execution_trace_edges(edges: EdgeList, arrays: SliceArrays, et: pd.DataFrame | None) -> None:
    """Producer end -> consumer start, for the latest producer of each input tensor that
    finished before the consumer started (earlier writers were overwritten)."""
    if et is None or len(et) == 0 or "slice" not in et.columns:
        return
    et = et[et["slice"].to_numpy() >= 0]
    if len(et) == 0:
        return
    sl = et["slice"].to_numpy(np.int64)
    et = et[arrays.node[sl]]
    if len(et) == 0:
        return
    prod = et[["slice", "outputs"]].explode("outputs").dropna()
    cons = et[["slice", "inputs"]].explode("inputs").dropna()
    if len(prod) == 0 or len(cons) == 0:
        return
    prod = pd.DataFrame(
        {
            "tensor": prod["outputs"].to_numpy(np.int64),
            "src": prod["slice"].to_numpy(np.int64),
        }
    )
    prod["t"] = arrays.end[prod["src"].to_numpy()]
    cons = pd.DataFrame(
        {
            "tensor": cons["inputs"].to_numpy(np.int64),
            "dst": cons["slice"].to_numpy(np.int64),
        }
    )
    cons["t"] = arrays.ts[cons["dst"].to_numpy()]
    pairs = pd.merge_asof(
        cons.sort_values("t"), prod.sort_values("t"), on="t", by="tensor", direction="backward"
    ).dropna(subset=["src"])
    src = pairs["src"].to_numpy(np.int64)
    dst = pairs["dst"].to_numpy(np.int64)
    keep = src != dst
    edges.add("data", src[keep], dst[keep], END, START)
