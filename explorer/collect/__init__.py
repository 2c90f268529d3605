"""Recording training steps into a trace: torch.profiler plus Explorer's own hooks.

The only package of Explorer that imports torch. ``collect(out_dir, **options)`` returns a
:class:`Collector` to use as a context manager; ``annotate(name)`` marks a user range.
"""

from __future__ import annotations

from explorer.collect.session import Collector, Terminated, annotate, collect

__all__ = ["Collector", "Terminated", "annotate", "collect"]
