"""``explorer.collect()``: the context manager a user wraps around training steps.

It starts torch.profiler with the chosen activities and schedule, installs Explorer's hooks
(syncs, copies, fallbacks, compile events) and the system sampler, and on the way out —
normally, on an exception, on Ctrl-C or on SIGTERM — stops everything, merges Explorer's
events into the profiler's trace and writes one ``.pt.trace.json.gz``. Then it re-raises
whatever was raised: collecting must never swallow a user's error.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import torch
from torch.profiler import ProfilerAction

from explorer.collect import device_activity, neuron_test_backend
from explorer.collect.compile_events import CompileEvents
from explorer.collect.environment import (
    accelerator_type,
    device_names,
    environment,
    rank_and_world_size,
)
from explorer.collect.event_buffer import EventBuffer, library_modules
from explorer.collect.fallback_capture import FallbackCapture
from explorer.collect.launcher_frames import drop_launcher_frames, launcher_frames
from explorer.collect.profiler_setup import choose_activities, make_schedule
from explorer.collect.runtime_hooks import RuntimeHooks
from explorer.collect.system_sampler import SystemSampler
from explorer.collect.trace_writer import (
    check_writable,
    default_stem,
    merge,
    read_chrome_trace,
    write_atomic,
)
from explorer.errors import ExplorerError
from explorer.processes import BlockSignals, Terminated

HOOK_NAMES = ("runtime", "fallback", "compile")
_active_lock = threading.Lock()
_active: Collector | None = None


def _hook_set(hooks: bool | Iterable[str]) -> set[str]:
    if hooks is True:
        return set(HOOK_NAMES)
    if hooks is False or hooks is None:
        return set()
    chosen = {str(h) for h in hooks}
    unknown = chosen - set(HOOK_NAMES)
    if unknown:
        raise ExplorerError(
            f"explorer.collect: unknown hooks {sorted(unknown)}; choose from {list(HOOK_NAMES)}"
        )
    return chosen


class Collector:
    """One collection session. Use through :func:`collect`::

        with explorer.collect("runs/resnet") as c:
            for batch in loader:
                train_step(batch)
                c.step()
        print(c.trace_path)

    Options: ``activities`` (names like ``"cpu"``, ``"cuda"`` or ``ProfilerActivity``; default
    CPU + the accelerator present), ``record_shapes``/``profile_memory``/``with_stack``
    (profiler switches, on by default), ``schedule`` (None = every step; a dict of
    wait/warmup/active/repeat/skip_first; or a step range such as ``range(5, 10)``), ``hooks``
    (True, False, or a subset of ``{"runtime", "fallback", "compile"}``), ``sampler_interval_s``
    (seconds between system samples; 0 or None turns the sampler off), ``name`` (file stem;
    default ``<host>_rank<R>_<timestamp>``), ``profiler_kwargs`` (passed to
    ``torch.profiler.profile`` as is).
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        *,
        activities: Iterable[Any] | None = None,
        record_shapes: bool = True,
        profile_memory: bool = True,
        with_stack: bool = True,
        schedule: Any = None,
        hooks: bool | Iterable[str] = True,
        sampler_interval_s: float | None = 0.1,
        name: str | None = None,
        profiler_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.out_dir = Path(out_dir).expanduser()
        check_writable(self.out_dir)
        self.activities = choose_activities(activities)
        self.schedule = make_schedule(schedule)
        self.hooks = _hook_set(hooks)
        self.sampler_interval_s = float(sampler_interval_s or 0)
        self.rank, self.world_size = rank_and_world_size()
        self.name = name or default_stem(self.rank)
        self.settings: dict[str, Any] = {
            "activities": [a.name for a in self.activities],
            "record_shapes": bool(record_shapes),
            "profile_memory": bool(profile_memory),
            "with_stack": bool(with_stack),
            "schedule": repr(schedule) if schedule is not None else None,
            "hooks": sorted(self.hooks),
            "sampler_interval_s": self.sampler_interval_s or None,
            "name": self.name,
        }
        self._profiler_kwargs = {
            "record_shapes": bool(record_shapes),
            "profile_memory": bool(profile_memory),
            "with_stack": bool(with_stack),
            **(profiler_kwargs or {}),
        }
        self.trace_path: Path | None = None
        self.steps = 0
        self.buffer = EventBuffer()
        self._runtime = RuntimeHooks(self.buffer, cpu_syncs=accelerator_type() is None)
        self._fallback = FallbackCapture(self.buffer)
        self._compile = CompileEvents(self.buffer)
        self._sampler: SystemSampler | None = None
        self._profiler: torch.profiler.profile | None = None
        self._cycles: list[Path] = []
        self._inside = False
        self._exiting = False
        self._signals = BlockSignals()
        self._environment: dict[str, Any] = {}
        self._launcher: set[str] = set()

    # -- the block ---------------------------------------------------------------------------
    def __enter__(self) -> Collector:
        global _active
        if self._exiting:
            raise ExplorerError(
                "explorer.collect: this collector already recorded its block — call explorer.collect(...) again for another"
            )
        with _active_lock:
            if _active is not None:
                raise ExplorerError(
                    "explorer.collect: another collect() block is already running in this process"
                )
            _active = self
        try:
            check_writable(self.out_dir)
            self._launcher = launcher_frames(sys._getframe(1))  # explorer demo's CLI frames
            self._environment = environment(self.settings)
            self._signals.open()
            if "runtime" in self.hooks:
                self._runtime.install()
            device_activity.attach(self.buffer)
            if "fallback" in self.hooks:
                self._fallback.install()
            if "compile" in self.hooks:
                if not self._compile.try_install(at_entry=True):
                    self._compile.watch_torch_compile()
            if self.sampler_interval_s > 0:  # built here: its psutil setup is not traced
                self._sampler = SystemSampler(self.buffer, self.sampler_interval_s)
            self._profiler = torch.profiler.profile(
                activities=self.activities,
                schedule=self.schedule or record_every_step,
                on_trace_ready=self._on_trace_ready,
                **self._profiler_kwargs,
            )
            self._profiler.start()
            if self._sampler is not None:
                # started after the profiler so that its Python tracer (with_stack) does not
                # follow the sampler thread: the trace shows the user's threads only
                self._sampler.start()
        except BaseException:
            if self._profiler is not None:
                try:
                    self._profiler.stop()
                except Exception:  # it may not have started; the original error matters
                    pass
            self._teardown()
            self._signals.close()
            raise
        self._inside = True
        self._t0 = time.perf_counter_ns()
        return self

    def step(self) -> None:
        """Mark the end of one training step (``ProfilerStep#N`` in the trace)."""
        if not self._inside or self._profiler is None:
            raise ExplorerError(
                "explorer.collect: c.step() called outside its `with explorer.collect(...) as c:` block — "
                "call it inside the block, once per training step"
            )
        self._profiler.step()
        self.steps += 1
        if "compile" in self.hooks:
            if self._compile.try_install():
                self._compile.harvest()

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        self._exiting = True
        self._inside = False
        # Ctrl-C or SIGTERM while the trace is being written would lose all of it: held
        # until it is written, then delivered.
        self._signals.closing(_writing_notice)
        try:
            self.trace_path = self._finish()
        except Exception as write_error:
            if exc is None:
                raise
            import warnings

            warnings.warn(
                f"explorer.collect: could not write the trace: {write_error}", stacklevel=2
            )
        finally:
            held = self._signals.close()
        if isinstance(exc, Terminated) or signal.SIGTERM in held:
            signal.raise_signal(signal.SIGTERM)  # the previous handler decides what SIGTERM does
        if signal.SIGINT in held and exc is None:
            raise KeyboardInterrupt  # the Ctrl-C that came while the trace was being written
        return False

    # -- internals ---------------------------------------------------------------------------
    def _on_trace_ready(self, prof: torch.profiler.profile) -> None:
        path = self.out_dir / f".{self.name}.{os.getpid()}.cycle{len(self._cycles)}.json"
        prof.export_chrome_trace(str(path))
        self._cycles.append(path)

    def _finish(self) -> Path:
        elapsed = time.perf_counter_ns() - getattr(self, "_t0", time.perf_counter_ns())
        prof = self._profiler
        try:
            if self._sampler is not None:
                self._sampler.stop()  # its last sample lands inside the recorded window
            if prof is not None:
                prof.stop()  # calls _on_trace_ready for the cycle being recorded
        finally:
            self._teardown()
        gc_was_enabled = gc.isenabled()
        gc.disable()  # millions of small dicts: the cyclic GC would triple the merge time
        try:
            missing = [p for p in self._cycles if not p.is_file()]
            if missing:  # the profiler could not write there: say why, not which temp file
                check_writable(self.out_dir)
                raise ExplorerError(
                    f"explorer.collect: the profiler did not write {missing[0]} — "
                    f"check that {self.out_dir} is writable and has free space"
                )
            cycles = [read_chrome_trace(p) for p in self._cycles]
            meta = {
                "version": self._environment.get("explorer_version", ""),
                "settings": self.settings,
                "environment": self._environment,
                "steps": self.steps,
                "elapsed_ns": int(elapsed),
                "rank": self.rank,
                "world_size": self.world_size,
                "sampler_samples": self._sampler_samples,
                "library_modules": library_modules(),
                **device_names(self._runtime.devices),
            }
            drop_trailing_step(cycles, self.steps)
            doc = merge(cycles, self.buffer.events, meta)
            if neuron_test_backend.registered():
                doc["explorer_test_backend"] = dict(neuron_test_backend.LABEL)
            doc["traceEvents"] = drop_launcher_frames(doc["traceEvents"], self._launcher)
            doc.setdefault("distributedInfo", {"rank": self.rank, "world_size": self.world_size})
            return write_atomic(doc, self.out_dir, self.name)
        finally:
            if gc_was_enabled:
                gc.enable()
            for p in self._cycles:
                p.unlink(missing_ok=True)
            self._cycles = []

    _sampler_samples = 0

    def _teardown(self) -> None:
        """Remove every hook and stop the sampler; safe to call more than once."""
        global _active
        if "compile" in self.hooks:
            self._compile.uninstall()
        self._fallback.uninstall()
        self._runtime.uninstall()
        device_activity.detach(self.buffer)
        if self._sampler is not None:
            self._sampler.stop()
            self._sampler_samples = self._sampler.samples
            self._sampler = None
        with _active_lock:
            if _active is self:
                _active = None


def _writing_notice(signum: int) -> None:
    if signum == signal.SIGINT:
        print(
            "explorer.collect: writing the trace — Ctrl-C will take effect when it is written",
            file=sys.stderr,
            flush=True,
        )


def record_every_step(step: int) -> ProfilerAction:
    """The schedule when none is given: record everything. (Passing a schedule is what makes
    torch.profiler write ``ProfilerStep#N`` markers, so we never pass None.)"""
    return ProfilerAction.RECORD


def drop_trailing_step(cycles: list[dict[str, Any]], steps: int) -> None:
    """Remove the ``ProfilerStep#<steps>`` that the last ``c.step()`` opened: it spans only
    the way out of the block, not a training step, and would read as a tiny extra step."""
    if steps < 1 or not cycles:
        return
    name = f"ProfilerStep#{steps}"
    events = cycles[-1].get("traceEvents", [])
    cycles[-1]["traceEvents"] = [e for e in events if e.get("name") != name]


def collect(out_dir: str | os.PathLike[str], **options: Any) -> Collector:
    """Record the training steps of a ``with`` block into ``out_dir`` (see :class:`Collector`)."""
    return Collector(out_dir, **options)


def annotate(name: str) -> torch.profiler.record_function:
    """A named user range (``with explorer.annotate("forward"):`` or as a decorator).

    A ``record_function``: it shows on the host timeline, and Kineto mirrors user
    annotations onto the device timeline (``gpu_user_annotation``) where the backend supports it.
    """
    return torch.profiler.record_function(name)
