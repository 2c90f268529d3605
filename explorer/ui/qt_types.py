"""Typing help at the Qt boundary: PyQt6's stubs mark most getters Optional
(``QTableWidget.horizontalHeader()``, ``QThreadPool.globalInstance()``...) where the widget
tree guarantees a value. :func:`present` states that once, at the call, instead of a
module-wide ``union-attr`` exemption (issue 27 item 7)."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def present(value: T | None, what: str = "the Qt object") -> T:
    """``value``, which the caller knows Qt made; an AssertionError naming ``what`` if not."""
    assert value is not None, f"{what} is missing"
    return value
