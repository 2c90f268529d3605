"""The analysis memo of one trace: results under declared names, with what they depend on.

This module is the mechanism only; it knows no analysis. Each analysis declares its key
where it is defined, with what the result is computed from — other keys, or the trace's
options (:func:`declare_options`; the model declares ``step_pattern`` and ``step_nesting``)::

    from explorer.trace.memo import memoised

    @memoised("stalls", depends_on=("steps", "launcher"))
    def stalls(trace: TraceData, step: int | None = None) -> pd.DataFrame:
        ...

That is the whole pattern for adding a key: name it once in its decorator, and list in
``depends_on`` every memoised result and every option it reads (directly: what those read
in turn follows from their own declarations). The memo keeps one result per name and
options (the function's other arguments, defaults filled in). A key is known once its
module is imported, which every caller that can compute it has done. A dependency may
name a key whose module a run never imports (the findings read the memory analysis only
for a trace with memory events): no result of it can then be kept, so none can be stale.
A misspelt dependency is caught by :func:`check`, which ``tests/trace/test_memo.py`` runs
with the whole package imported.

A trace with other options (:meth:`explorer.trace.model.TraceData.with_steps`) is a view
whose memo (:meth:`Memo.view`) keeps its own results for the keys that depend, directly or
through other keys, on an option it changes, and shares every other result with the
trace it was made from (user frames are not parsed again for another step pattern).

The memo is safe across threads (the viewer computes analyses in workers): one lock guards
the table, one lock per entry makes a second thread wait for the first one's result instead
of computing it again, and a result computed while :meth:`Memo.invalidate` dropped its key
is returned to its caller but not kept. The memo itself writes nothing to disk; a trace
opened from the cache gets a :attr:`Memo.store` (:mod:`explorer.store.results`) that keeps
some results beside its tables, found again by the next process.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar


class Memoising(Protocol):
    """What :func:`memoised` needs of a trace: its memo (the model is one)."""

    @property
    def memo(self) -> Memo: ...


_registry_lock = threading.Lock()
#: Every declared key and what it is computed from (keys or options), in declaring order.
_KEYS: dict[str, tuple[str, ...]] = {}
#: The options of a trace that results may depend on (attributes, never memo entries).
_OPTIONS: set[str] = set()
_closure: dict[str, frozenset[str]] = {}  # reset whenever a declaration is added


def declare_options(*names: str) -> None:
    """Declare options of a trace that memo keys may depend on (the model's step options)."""
    with _registry_lock:
        clash = [n for n in names if n in _KEYS]
        if clash:
            raise ValueError(f"{clash} are memo keys, not options")
        _OPTIONS.update(names)
        _closure.clear()


def declare(name: str, depends_on: Iterable[str] = ()) -> None:
    """Declare the memo key ``name`` and what its result is computed from (other keys, or
    options). :func:`memoised` does this; call it directly only for a result kept with
    :meth:`Memo.compute` rather than by a decorated function. Declaring a name again with
    the same dependencies is harmless (a module reloaded); with others, an error."""
    deps = tuple(depends_on)
    with _registry_lock:
        if name in _OPTIONS:
            raise ValueError(f"{name!r} is an option, not a memo key")
        if name in _KEYS and _KEYS[name] != deps:
            raise ValueError(f"memo key {name!r} is declared twice, with {_KEYS[name]} and {deps}")
        _KEYS[name] = deps
        _closure.clear()


def declared() -> dict[str, tuple[str, ...]]:
    """Every key declared so far (by the modules imported so far) and its dependencies."""
    with _registry_lock:
        return dict(_KEYS)


def options() -> frozenset[str]:
    """The declared options."""
    with _registry_lock:
        return frozenset(_OPTIONS)


def check(name: str | None = None) -> None:
    """Raise ValueError when ``name`` (default: every declared key) depends on a name that
    is neither a declared key nor an option."""
    with _registry_lock:
        names = [name] if name is not None else list(_KEYS)
        for n in names:
            unknown = [d for d in _KEYS.get(n, ()) if d not in _KEYS and d not in _OPTIONS]
            if unknown:
                raise ValueError(f"memo key {n!r} depends on undeclared {unknown}")


def _require(name: str) -> None:
    if name not in _KEYS:
        raise KeyError(f"{name!r} is not a declared memo key (see explorer.trace.memo)")


def computed_from(name: str) -> frozenset[str]:
    """Every key and option ``name``'s result is computed from, directly or through other
    keys (not ``name`` itself)."""
    with _registry_lock:
        got = _closure.get(name)
        if got is not None:
            return got
        out: set[str] = set()
        frontier = set(_KEYS.get(name, ()))
        while frontier:
            out |= frontier
            frontier = {d for f in frontier for d in _KEYS.get(f, ())} - out
        got = _closure[name] = frozenset(out)
        return got


def dependents(changed: str) -> frozenset[str]:
    """Every declared key computed, directly or through other keys, from ``changed``."""
    return frozenset(k for k in declared() if changed in computed_from(k))


class ResultStoreLike(Protocol):
    """Results kept outside the process: ``load`` returns :data:`NOT_STORED` when it has none."""

    def load(self, name: str, options: Hashable) -> Any: ...

    def has(self, name: str, options: Hashable) -> bool:
        """Whether a result is stored (without reading it)."""
        ...

    def save(self, name: str, options: Hashable, value: Any) -> None: ...

    #: Whether :meth:`save` writes straight to a place every process reads (a cache
    #: entry's directory on disk), so that a forked child may store its own results
    #: (:func:`explorer.analysis.ahead.stored_here`); False for one that keeps them first.
    SAVES_AT_ONCE: bool = False

    def for_trace(self, trace: Any) -> ResultStoreLike:
        """The same stored results for ``trace``, a view of this store's trace under other
        options (:meth:`TraceData.with_steps`): its results are keyed by its own options."""
        ...


#: What :meth:`ResultStoreLike.load` returns for a result it does not hold.
NOT_STORED: Any = object()

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T", bound=Memoising)


class Memo:
    """Results of the analyses of one trace, keyed by (declared name, options)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[tuple[str, Hashable], Any] = {}
        self._entry_locks: dict[tuple[str, Hashable], threading.RLock] = {}
        self._generation = 0
        #: For a view: the memo it shares results with, and the options it changes.
        self._base: Memo | None = None
        self._changed: frozenset[str] = frozenset()
        #: Where results outlive the process (see :mod:`explorer.store.results`), or None.
        self.store: ResultStoreLike | None = None

    def view(self, changed: Iterable[str]) -> Memo:
        """A memo for a trace that differs from this one's in the options ``changed``: it
        keeps its own results for the keys computed from any of them and shares the rest
        with this memo."""
        changed = frozenset(changed)
        unknown = changed - options()
        if unknown:
            raise KeyError(f"{sorted(unknown)} are not declared options")
        out = Memo()
        out._base = self
        out._changed = changed
        return out

    def store_of(self, name: str) -> ResultStoreLike | None:
        """Where ``name``'s results are stored (None: nowhere): this memo's store, or that
        of the memo a view shares them with."""
        return self._owner(name).store

    def _owner(self, name: str) -> Memo:
        """The memo that keeps ``name``'s results: this one, or the one a view shares with."""
        memo = self
        while memo._base is not None and not (memo._changed & computed_from(name)):
            memo = memo._base
        return memo

    def compute(self, name: str, options: Hashable, produce: Callable[[], R]) -> R:
        """The result kept under ``(name, options)``, computing it with ``produce`` once."""
        _require(name)
        owner = self._owner(name)
        if owner is not self:
            return owner.compute(name, options, produce)
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

    def chain(self) -> list[Memo]:
        """This memo and those it shares results with (a view's base, and its base's)."""
        out: list[Memo] = [self]
        base = self._base
        while base is not None:
            out.append(base)
            base = base._base
        return out

    def kept(self, names: Iterable[str]) -> dict[tuple[str, Hashable], Any]:
        """The results kept for ``names``, under every options, as this memo's trace sees
        them (a view's own, and what it shares): what another process computed for this
        trace hands back (:mod:`explorer.analysis.ahead`)."""
        wanted = set(names)
        out: dict[tuple[str, Hashable], Any] = {}
        for name in wanted:
            owner = self._owner(name)
            with owner._lock:
                out.update({k: v for k, v in owner._values.items() if k[0] == name})
        return out

    def adopt(self, values: dict[tuple[str, Hashable], Any], generation: int) -> None:
        """Keep ``values`` (``(name, options) -> result``, from :meth:`kept` in another
        process working on the same tables) as if computed here, and store them where the
        memo stores what it computes. Results already kept stay; none is kept when an
        invalidation came after ``generation`` (:attr:`generation` when the work began)."""
        if self.generation != generation:
            return
        for (name, options), value in values.items():
            _require(name)
            owner = self._owner(name)
            key = (name, options)
            with owner._lock:
                if key in owner._values:
                    continue
                owner._values[key] = value
            if owner.store is not None:
                owner.store.save(name, options, value)

    @property
    def generation(self) -> int:
        """How many invalidations this memo has seen (see :meth:`adopt`)."""
        return sum(m._generation for m in self.chain())

    def available(self, name: str, options: Hashable = ()) -> bool:
        """Whether the result is at hand without computing it: kept, or stored."""
        if self.peek(name, options) is not None:
            return True
        store = self._owner(name).store
        return store is not None and store.has(name, options)

    def peek(self, name: str, options: Hashable = ()) -> Any | None:
        """The kept result, or None when it has not been computed (never computes: for a
        view that must not block)."""
        _require(name)
        owner = self._owner(name)
        with owner._lock:
            return owner._values.get((name, options))

    def invalidate(self, changed: str) -> None:
        """Drop every result of this memo computed from ``changed`` (an option or a key),
        and ``changed``'s own."""
        if changed not in options() and changed not in declared():
            raise KeyError(f"{changed!r} is neither an option nor a memo key")
        stale = dependents(changed) | {changed}
        with self._lock:
            self._generation += 1
            for key in [k for k in self._values if k[0] in stale]:
                del self._values[key]

    def names(self) -> set[str]:
        """The names that hold at least one result (for a view: its own and those it shares)."""
        with self._lock:
            own = {name for name, _ in self._values}
        if self._base is None:
            return own
        return own | {n for n in self._base.names() if self._owner(n) is not self}


def memoised(
    name: str, depends_on: Iterable[str] = ()
) -> Callable[[Callable[Concatenate[T, P], R]], Callable[Concatenate[T, P], R]]:
    """Declare the memo key ``name`` (see the module docstring) and keep ``f(trace, ...)``'s
    result in ``trace.memo`` under it and its options (the other arguments, defaults
    filled in). ``depends_on`` names every key and option the result is computed from."""
    declare(name, depends_on)

    def wrap(f: Callable[Concatenate[T, P], R]) -> Callable[Concatenate[T, P], R]:
        signature = inspect.signature(f)

        @functools.wraps(f)
        def memo_call(trace: T, *args: P.args, **kwargs: P.kwargs) -> R:
            bound = signature.bind(trace, *args, **kwargs)
            bound.apply_defaults()
            options = tuple(bound.arguments.values())[1:]
            return trace.memo.compute(name, options, lambda: f(trace, *args, **kwargs))

        return memo_call

    return wrap
