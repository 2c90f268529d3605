"""PyTorch Execution Traces (ExecutionTraceObserver, Chakra schema): attached to the Kineto
trace captured with them, never read alone.

An Execution Trace knows what the timeline does not: which tensors each op read and wrote,
so data dependencies between ops. Its nodes are matched to the timeline's ``cpu_op``
slices by record-function id (``rf_id`` ↔ the slice's ``Record function id`` arg; traces
from PyTorch versions that do not write that arg use the same number as ``External id``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from explorer.errors import TraceError
from explorer.trace.decode import read_bytes, read_head
from explorer.trace.model import TraceData


def is_execution_trace(path: Path) -> bool:
    """True when the file's first bytes look like an Execution Trace."""
    head = read_head(path)
    return b'"nodes"' in head and b'"schema"' in head and b'"traceEvents"' not in head


def _tensor_ids(values: Any, types: Any) -> list[int]:
    """Tensor ids among an op's inputs or outputs: ``Tensor(...)`` values are
    ``[tensor_id, storage_id, offset, numel, elem_size, device]``."""
    out: list[int] = []
    if not isinstance(values, list) or not isinstance(types, list):
        return out
    for v, t in zip(values, types, strict=False):
        if (
            isinstance(t, str)
            and t.startswith("Tensor(")
            and isinstance(v, list)
            and v
            and isinstance(v[0], int)
        ):
            out.append(v[0])
        elif isinstance(t, str) and t.startswith("GenericList[Tensor") and isinstance(v, list):
            out.extend(x[0] for x in v if isinstance(x, list) and x and isinstance(x[0], int))
    return out


def read_execution_trace(path: Path) -> pd.DataFrame:
    """One row per ET node: ``et_id``, ``name``, ``rf_id``, ``parent``, ``inputs``, ``outputs``
    (lists of tensor ids), ``tid``."""
    data, _ = read_bytes(path)
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise TraceError(
            path, f"the execution trace is not valid JSON ({exc})", "re-capture it"
        ) from None
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    if not isinstance(nodes, list):
        raise TraceError(path, "no 'nodes' list: not a PyTorch Execution Trace")
    return pd.DataFrame(
        {
            "et_id": np.array([n.get("id", -1) for n in nodes], np.int64),
            "name": [str(n.get("name", "")) for n in nodes],
            "rf_id": np.array(
                [n.get("rf_id", -1) if isinstance(n.get("rf_id"), int) else -1 for n in nodes],
                np.int64,
            ),
            "parent": np.array(
                [n.get("parent", -1) if isinstance(n.get("parent"), int) else -1 for n in nodes],
                np.int64,
            ),
            "tid": np.array(
                [n.get("tid", -1) if isinstance(n.get("tid"), int) else -1 for n in nodes], np.int64
            ),
            "inputs": [_tensor_ids(n.get("inputs"), n.get("input_types")) for n in nodes],
            "outputs": [_tensor_ids(n.get("outputs"), n.get("output_types")) for n in nodes],
        }
    )


def attach_execution_trace(trace: TraceData, path: Path) -> None:
    """Set ``trace.execution_trace``: the ET nodes plus ``slice``, the matching cpu_op slice
    id (-1 when the op is not on the timeline)."""
    et = read_execution_trace(path)
    ops = np.flatnonzero(np.asarray(trace.slices["kind"] == "cpu_op"))
    rf = np.array([trace.args(int(i)).get("Record function id", -1) for i in ops], dtype=object)
    rf = np.array([v if isinstance(v, int) else -1 for v in rf], np.int64)
    key = rf if (rf > 0).any() else trace.slices["external_id"].to_numpy()[ops]
    lookup = pd.Series(ops, index=key)
    lookup = lookup[~lookup.index.duplicated(keep="first")]
    et["slice"] = lookup.reindex(et["rf_id"].to_numpy()).fillna(-1).astype(np.int64).to_numpy()
    trace.execution_trace = et
    trace.metadata["execution_trace"] = str(path)


def claims(path: Path) -> bool:
    """Is ``path`` an Execution Trace file (judged from its first bytes)?"""
    return path.is_file() and is_execution_trace(path)


def read(path: Path, options: Any) -> TraceData:
    """An Execution Trace holds no timeline: named alone, it is an error that says which
    file to load with it."""
    raise TraceError(
        path,
        "this is a PyTorch Execution Trace, not a timeline trace",
        "load the Kineto trace captured with it (explorer.load(kineto, execution_trace=this_file))",
    )
