"""One module per finding kind; the registry :data:`DETECTORS` that
:func:`explorer.analysis.findings.findings` runs.

Each detector module declares ``KIND`` (the finding kind it reports), ``REASONS`` (the
breakdown reasons it measures, see :mod:`explorer.analysis.breakdown`) and
``detect(ctx) -> list[Finding]``. The registry checks the declarations when it is imported:
a reason that the breakdown does not define, or a kind declared twice, is an error — never a
detector that silently finds nothing. While a detector runs, its context refuses reasons it
did not declare. Adding a kind is adding a module here and a line below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from explorer.analysis.detectors import (
    communication,
    compilation,
    cpu_fallback,
    input_stall,
    launch_bound,
    memcpy_stall,
    memory,
    runtime_stall,
    sync_stall,
)
from explorer.analysis.detectors.context import REASON_NAMES, Context
from explorer.analysis.finding import Finding


@dataclass(frozen=True)
class Detector:
    """A finding kind, the breakdown reasons it reads, and the function that finds it."""

    kind: str
    reasons: frozenset[str]
    detect: Callable[[Context], list[Finding]]


def declared(module: ModuleType) -> Detector:
    """The detector a module declares, checked against the breakdown's reasons."""
    unknown = sorted(set(module.REASONS) - REASON_NAMES)
    if unknown:
        raise ValueError(
            f"{module.__name__} reads unknown breakdown reason(s) {unknown}; "
            f"known: {sorted(REASON_NAMES)}"
        )
    return Detector(module.KIND, frozenset(module.REASONS), module.detect)


def registry(modules: tuple[ModuleType, ...]) -> tuple[Detector, ...]:
    """The detectors of ``modules`` in order; each kind once."""
    out = tuple(declared(m) for m in modules)
    kinds = [d.kind for d in out]
    twice = sorted({k for k in kinds if kinds.count(k) > 1})
    if twice:
        raise ValueError(f"finding kind(s) {twice} declared by more than one detector")
    return out


#: Every detector, in the order reports list kinds with equal time lost.
DETECTORS: tuple[Detector, ...] = registry(
    (
        input_stall,
        memcpy_stall,
        sync_stall,
        cpu_fallback,
        runtime_stall,
        launch_bound,
        compilation,
        communication,
        memory,
    )
)
#: Every kind a finding can have.
FINDING_KINDS: tuple[str, ...] = tuple(d.kind for d in DETECTORS)

__all__ = ["DETECTORS", "FINDING_KINDS", "Context", "Detector"]
