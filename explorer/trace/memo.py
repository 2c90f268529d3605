"""The analysis memo of one trace: results under declared names, with what they depend on.

An analysis that is worth keeping is decorated with :func:`memoised` under a name listed in
:data:`MEMO_KEYS`; the memo keeps one result per name and options (the function's other
arguments). :data:`MEMO_KEYS` says, for every name, which other results and which settings
(:data:`SETTINGS`, e.g. the trace's step pattern) it is computed from, so changing a setting
drops exactly the results that depend on it, transitively, and nothing else.

The memo is safe across threads (the viewer computes analyses in workers): one lock guards
the table, one lock per entry makes a second thread wait for the first one's result instead
of computing it again, and a result computed while a setting changed is returned to its
caller but not kept. The memo itself writes nothing to disk; a trace opened from the cache
gets a :attr:`Memo.store` (:mod:`explorer.store.results`) that keeps some results beside
its tables, found again by the next process.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar

if TYPE_CHECKING:
    from explorer.trace.model import TraceData

#: User settings that results can depend on (attributes of the trace, never memo entries).
SETTINGS: frozenset[str] = frozenset({"step_pattern", "step_nesting"})

#: Every memoised result and what it is computed from (other results, or settings).
MEMO_KEYS: dict[str, tuple[str, ...]] = {
    "slice_sides": (),
    "user_frames": (),
    "launcher": (),
    "before_capture": ("launcher",),
    "frame_codes": ("user_frames", "launcher"),
    "slice_classes": ("launcher",),
    "slice_sources": ("frame_codes",),
    "by_source": ("frame_codes", "launcher", "slice_classes"),
    "statement_codes": ("frame_codes", "launcher"),
    "steps": ("step_pattern", "step_nesting"),
    "attributed_steps": ("steps", "launcher", "before_capture"),
    "partial_steps": ("steps",),
    "step_origin": ("steps",),
    "reason_timelines": ("slice_classes", "attributed_steps", "before_capture"),
    "breakdown": ("steps", "attributed_steps", "reason_timelines"),
    "memory_timeline": (),
    "fallback_calls": (),
    "memory_allocations": ("steps", "frame_codes"),
    "findings": (
        "steps",
        "breakdown",
        "reason_timelines",
        "slice_sources",
        "memory_allocations",
        "fallback_calls",
        "statement_codes",
    ),
    "dependency_graph": ("steps", "launcher"),
    "critical_path": ("dependency_graph", "frame_codes"),
    "cross_track_waits": ("dependency_graph",),
}


def _check_keys() -> None:
    for name, deps in MEMO_KEYS.items():
        unknown = [d for d in deps if d not in MEMO_KEYS and d not in SETTINGS]
        if unknown:
            raise ValueError(f"memo key {name!r} depends on undeclared {unknown}")


_check_keys()


def dependents(changed: str) -> frozenset[str]:
    """Every memo key computed, directly or through other keys, from ``changed``."""
    out: set[str] = set()
    frontier = {changed}
    while frontier:
        new = {k for k, deps in MEMO_KEYS.items() if frontier & set(deps)} - out
        out |= new
        frontier = new
    return frozenset(out)


class ResultStoreLike(Protocol):
    """Results kept outside the process: ``load`` returns :data:`NOT_STORED` when it has none."""

    def load(self, name: str, options: Hashable) -> Any: ...

    def save(self, name: str, options: Hashable, value: Any) -> None: ...


#: What :meth:`ResultStoreLike.load` returns for a result it does not hold.
NOT_STORED: Any = object()

P = ParamSpec("P")
R = TypeVar("R")


class Memo:
    """Results of the analyses of one trace, keyed by (declared name, options)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[tuple[str, Hashable], Any] = {}
        self._entry_locks: dict[tuple[str, Hashable], threading.RLock] = {}
        self._generation = 0
        #: Where results outlive the process (see :mod:`explorer.store.results`), or None.
        self.store: ResultStoreLike | None = None

    def compute(self, name: str, options: Hashable, produce: Callable[[], R]) -> R:
        """The result kept under ``(name, options)``, computing it with ``produce`` once."""
        if name not in MEMO_KEYS:
            raise KeyError(f"{name!r} is not a declared memo key (see MEMO_KEYS)")
        key = (name, options)
        with self._lock:
            if key in self._values:
                return self._values[key]
            entry = self._entry_locks.setdefault(key, threading.RLock())
        with entry:
            with self._lock:
                if key in self._values:  # another thread computed it while we waited
                    return self._values[key]
                generation = self._generation
            store = self.store
            stored = store.load(name, options) if store is not None else NOT_STORED
            value = produce() if stored is NOT_STORED else stored
            with self._lock:
                if generation == self._generation:
                    kept: R = self._values.setdefault(key, value)
                    if stored is NOT_STORED and store is not None:
                        store.save(name, options, kept)
                    return kept
            return value

    def peek(self, name: str, options: Hashable = ()) -> Any | None:
        """The kept result, or None when it has not been computed (never computes: for a
        view that must not block)."""
        if name not in MEMO_KEYS:
            raise KeyError(f"{name!r} is not a declared memo key (see MEMO_KEYS)")
        with self._lock:
            return self._values.get((name, options))

    def invalidate(self, changed: str) -> None:
        """Drop every result computed from ``changed`` (a setting or a memo key)."""
        if changed not in SETTINGS and changed not in MEMO_KEYS:
            raise KeyError(f"{changed!r} is neither a setting nor a memo key")
        stale = dependents(changed) | ({changed} if changed in MEMO_KEYS else set())
        with self._lock:
            self._generation += 1
            for key in [k for k in self._values if k[0] in stale]:
                del self._values[key]

    def names(self) -> set[str]:
        """The names that hold at least one result."""
        with self._lock:
            return {name for name, _ in self._values}


def memoised(
    name: str,
) -> Callable[[Callable[Concatenate[TraceData, P], R]], Callable[Concatenate[TraceData, P], R]]:
    """Keep ``f(trace, ...)``'s result in ``trace.memo`` under ``name`` and its options (the
    other arguments, defaults filled in). ``name`` must be in :data:`MEMO_KEYS`."""
    if name not in MEMO_KEYS:
        raise KeyError(f"{name!r} is not a declared memo key (see MEMO_KEYS)")

    def wrap(f: Callable[Concatenate[TraceData, P], R]) -> Callable[Concatenate[TraceData, P], R]:
        signature = inspect.signature(f)

        @functools.wraps(f)
        def memo_call(trace: TraceData, *args: P.args, **kwargs: P.kwargs) -> R:
            bound = signature.bind(trace, *args, **kwargs)
            bound.apply_defaults()
            options = tuple(bound.arguments.values())[1:]
            return trace.memo.compute(name, options, lambda: f(trace, *args, **kwargs))

        return memo_call

    return wrap
