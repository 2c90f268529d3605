"""Synthetic traces with known answers: the ground truth Explorer's detectors are tested on.

Each scenario simulates a small model training on one GPU (a host thread launching onto
device streams, with a bounded launch queue, stream ordering, blocking copies and
synchronisations) and writes the Kineto JSON torch.profiler would have written, with one
pathology injected and measured exactly::

    doc = generate("sync_storm", steps=8, seed=0)
    doc["explorer_injected"]  # [{"kind": "sync_stall", "time_lost_ns": ..., "steps": [...],
                              #   "source_line": ["/synthetic/train.py", 75], ...}]
    write("input_stall", "input_stall.json.gz")
    write_large("big.json", n_events=1_000_000)  # for benchmarks

Every document says ``"synthetic": true`` at its top level (and ``traceName`` starts with
``synthetic:``), so anything that shows it can say so.

Scenarios (see :data:`SCENARIOS`, and :mod:`explorer.scenarios.ground_truth` for exactly what
each ``time_lost_ns`` sums): ``clean``, ``input_stall``, ``pageable_copies``, ``sync_storm``,
``cpu_fallback``, ``launch_bound``, ``compile_pause``, ``memory_growth``; and several at
once: ``input_and_sync``, ``input_sync_pageable``.
"""

from __future__ import annotations

import gzip
from os import PathLike
from pathlib import Path
from typing import Any

import msgspec

from explorer.errors import UsageError
from explorer.scenarios.catalog import CATALOG, Scenario
from explorer.scenarios.document import ORIGIN_NS, kineto_document
from explorer.scenarios.simulator import Simulator
from explorer.scenarios.workload import TrainingLoop

#: name → :class:`Scenario` (iterating gives the names).
SCENARIOS: dict[str, Scenario] = CATALOG


def _scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise UsageError(
            f"unknown scenario {name!r}; choose one of: {', '.join(SCENARIOS)}"
        ) from None


def simulate(
    name: str,
    steps: int = 8,
    seed: int = 0,
    scale: int = 1,
    jitter: float = 0.08,
    collector_events: bool = True,
) -> Simulator:
    """Run a scenario's simulation and return the simulator (events and records)."""
    sc = _scenario(name)
    if steps < 1 or scale < 1:
        raise UsageError(f"steps and scale must be at least 1 (got steps={steps}, scale={scale})")
    sim = Simulator(seed=seed, jitter=jitter)
    pathologies = sc.pathologies(steps, scale)
    pathologies.collector_events = collector_events
    TrainingLoop(sim, pathologies, scale=scale).run(steps)
    return sim


def generate(
    name: str,
    steps: int = 8,
    seed: int = 0,
    scale: int = 1,
    collector_events: bool = True,
    jitter: float = 0.08,
) -> dict[str, Any]:
    """A Kineto JSON document (as a dict) of ``steps`` training steps of scenario ``name``.

    Deterministic for a given ``(name, steps, seed, scale)``. ``scale`` multiplies the model's
    depth (and so events per step). The top level carries ``"synthetic": true``,
    ``"explorer_injected"`` (one entry per injected pathology, none for ``clean``) and
    ``"explorer_scenario"`` (name, summary, parameters, definition of the time lost).
    ``collector_events=False`` leaves out Explorer's own ``explorer_*`` events (the CPU
    fallback and the compile are then visible only as torch.profiler shows them).
    ``jitter``: relative spread of every simulated duration (0: identical steps).
    """
    sc = _scenario(name)
    sim = simulate(
        name,
        steps=steps,
        seed=seed,
        scale=scale,
        jitter=jitter,
        collector_events=collector_events,
    )
    injected = [truth(sim) for truth in sc.truths]
    for entry in injected:  # ranges relative to the file's earliest timestamp (a loader's 0)
        entry["ranges"] = [[a - ORIGIN_NS, b - ORIGIN_NS] for a, b in entry["ranges"]]
    meta = {
        "name": name,
        "summary": sc.summary,
        "steps": steps,
        "seed": seed,
        "scale": scale,
        "collector_events": collector_events,
        "jitter": jitter,
        "definition": sc.definition,
        "source_file": "/synthetic/train.py",
    }
    return kineto_document(name, sim.events, sim.t, injected, meta)


def dumps(doc: dict[str, Any]) -> bytes:
    """The document as JSON bytes (msgspec: several times faster than json)."""
    return msgspec.json.encode(doc)


def write(name: str, path: str | PathLike[str], **kw: Any) -> Path:
    """Generate scenario ``name`` (``kw`` as for :func:`generate`) and write it to ``path``,
    gzip-compressed when the name ends in ``.gz``. Returns the path."""
    path = Path(path)
    data = dumps(generate(name, **kw))
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wb", compresslevel=6) as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


def write_large(
    path: str | PathLike[str], n_events: int = 1_000_000, scenario: str = "clean", seed: int = 0
) -> Path:
    """A trace of at least ``n_events`` events for benchmarks: a steady-state step of
    ``scenario`` repeated, streamed to disk (see :mod:`explorer.scenarios.large`)."""
    from explorer.scenarios.large import write_large as _write_large

    return _write_large(path, n_events=n_events, scenario=scenario, seed=seed)


__all__ = ["SCENARIOS", "Scenario", "generate", "simulate", "write", "write_large"]
