"""One module per finding kind; each exposes ``detect(ctx) -> list[Finding]``.

:data:`DETECTORS` is the registry :func:`explorer.analysis.findings.findings` runs. Adding a
kind is adding a module here and a line below.
"""

from __future__ import annotations

from collections.abc import Callable

from explorer.analysis.detectors import (
    communication,
    compile,
    cpu_fallback,
    input_stall,
    launch_bound,
    memcpy_stall,
    memory,
    sync_stall,
)
from explorer.analysis.detectors.context import Context
from explorer.analysis.finding import Finding

DETECTORS: dict[str, Callable[[Context], list[Finding]]] = {
    "input_stall": input_stall.detect,
    "memcpy_stall": memcpy_stall.detect,
    "sync_stall": sync_stall.detect,
    "cpu_fallback": cpu_fallback.detect,
    "launch_bound": launch_bound.detect,
    "compile": compile.detect,
    "communication": communication.detect,
    "memory": memory.detect,
}

__all__ = ["DETECTORS", "Context"]
