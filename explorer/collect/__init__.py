"""Recording training steps into a trace: torch.profiler plus Explorer's own hooks.

The only package of Explorer that imports torch. ``collect(out_dir, **options)`` returns a
:class:`Collector` to use as a context manager; ``annotate(name)`` marks a user range.

This package is also *callable*: importing a submodule binds ``explorer.collect`` to the
package, replacing the ``explorer.collect()`` function that ``explorer/__init__.py``
defines. Making the module object call :func:`collect` keeps ``explorer.collect(...)``
working whichever was bound last.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from explorer.collect.session import Collector, Terminated, annotate, collect


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Collector:
        return collect(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["Collector", "Terminated", "annotate", "collect"]
