"""A finding: one thing that costs time, why, where in the user's code, and what to do.

Findings are data. Detectors (:mod:`explorer.analysis.detectors`) make them, renderers and
views show them; nothing here formats text for a terminal.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass
class Finding:
    """One ranked problem.

    ``time_lost_ns`` is device (or host, on CPU-only traces) time the pathology cost inside
    the steps; ``share`` is that over the total step time (0–1). ``steps`` lists the steps
    affected, ``ranges`` the ``(start_ns, end_ns)`` windows where the time was lost (trace
    time, as in ``slices.ts``), ``evidence`` slice ids a user can click, ``source_lines``
    the responsible ``(file, line, function)`` frames, heaviest first. ``details`` carries
    kind-specific numbers (counts, bytes, reasons) for renderers that want them.
    """

    kind: str
    title: str
    time_lost_ns: int
    share: float
    steps: list[int] = field(default_factory=list)
    ranges: list[tuple[int, int]] = field(default_factory=list)
    evidence: list[int] = field(default_factory=list)
    source_lines: list[tuple[str, int, str]] = field(default_factory=list)
    explanation: str = ""
    recommendation: str = ""
    device: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    #: The step time its fix would save, summed over its steps, by replaying the dependency
    #: graph without what the finding names (:func:`explorer.analysis.whatif.predict_savings`;
    #: None until predicted). ``predicted_note``: why it is well under ``time_lost_ns``.
    predicted_saving_ns: int | None = None
    predicted_note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (tuples become lists, numpy ints become ints)."""
        d = asdict(self)
        d["time_lost_ns"] = int(self.time_lost_ns)
        d["share"] = float(self.share)
        if self.predicted_saving_ns is not None:
            d["predicted_saving_ns"] = int(self.predicted_saving_ns)
        d["steps"] = [int(s) for s in self.steps]
        d["ranges"] = [[int(a), int(b)] for a, b in self.ranges]
        d["evidence"] = [int(i) for i in self.evidence]
        d["source_lines"] = [
            {"file": str(f), "line": int(ln), "function": str(fn)}
            for f, ln, fn in self.source_lines
        ]
        d["details"] = _plain(self.details)
        return d


def _plain(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):  # numpy scalar
        return v.item()
    return v
