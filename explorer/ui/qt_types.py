"""Typing help at the Qt boundary: PyQt6's stubs mark most getters Optional
(``QTableWidget.horizontalHeader()``, ``QThreadPool.globalInstance()``...) where the widget
tree guarantees a value. :func:`present` states that once, at the call, instead of a
module-wide ``union-attr`` exemption (issue 27 item 7)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")


def present(value: T | None, what: str = "the Qt object") -> T:
    """``value``, which the caller knows Qt made; an AssertionError naming ``what`` if not."""
    assert value is not None, f"{what} is missing"
    return value


def only_while(current: Callable[[], bool], slot: Callable[P, None]) -> Callable[P, None]:
    """``slot``, run only while ``current()`` holds: a worker's signals reach the window
    only while it is still the window's worker (one replaced by another is ignored). A
    slot of its own, where ``lambda: current() and slot()`` would use ``slot``'s None."""

    def call(*args: P.args, **kwargs: P.kwargs) -> None:
        if current():
            slot(*args, **kwargs)

    return call
