"""The report formats: one module per format in this package, each rendering any
:class:`~explorer.report.document.Document` (trace report, job report, diff).

A format module defines ``NAME`` (what ``--format`` takes), ``ORDER`` (its place in the
list) and ``render(document, color) -> str``; it is found here by being in this package,
so adding a format touches one file. Renderers only lay out: every string they show is
already in the document, and none imports an analysis.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

from explorer.errors import UsageError
from explorer.report.document import Document

Renderer = Callable[[Document, bool], str]


def _discover() -> dict[str, Renderer]:
    found: list[tuple[int, str, Renderer]] = []
    for info in pkgutil.iter_modules(__path__):
        mod = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(mod, "NAME") and hasattr(mod, "render"):
            found.append((int(getattr(mod, "ORDER", 100)), str(mod.NAME), mod.render))
    return {name: fn for _, name, fn in sorted(found, key=lambda f: (f[0], f[1]))}


#: Every format, in the order ``--format`` lists them.
RENDERERS: dict[str, Renderer] = _discover()
FORMATS: tuple[str, ...] = tuple(RENDERERS)


def check_format(format: str, what: str = "report") -> None:
    """Raise the one-line usage error for a format no module renders."""
    if format not in RENDERERS:
        raise UsageError(f"unknown {what} format {format!r} (choose from {', '.join(FORMATS)})")


def render(document: Document, format: str = "text", color: bool = False) -> str:
    """``document`` in ``format`` (``color``: ANSI colour, where the format has it)."""
    check_format(format)
    return RENDERERS[format](document, color)


__all__ = ["FORMATS", "RENDERERS", "check_format", "render"]
