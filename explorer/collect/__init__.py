"""Recording training steps into a trace: torch.profiler plus Explorer's own hooks.

The only package of Explorer that imports torch. It is also the one object behind the name
``explorer.collect``: calling it — ``with explorer.collect(out_dir, **options) as c:`` — is
:func:`explorer.collect.session.collect`, which returns a :class:`Collector` to use as a
context manager; ``explorer.annotate(name)`` marks a user range.

Why a callable package and not a function: Python binds ``explorer.collect`` to this package
the moment any submodule (``explorer.collect.session``, the ``neuron`` test backend) is
imported, so a function of that name in ``explorer/__init__.py`` would be replaced by the
package depending on import order — ``help()``, ``inspect`` and a debugger would see one or
the other. Here the name means this package, always: ``explorer/__init__.py`` loads it on
first use (so ``import explorer`` does not import torch), and the package's class gives it a
``__call__`` with :func:`collect`'s signature.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

from explorer.collect.session import Collector, Terminated, annotate, collect


class CollectPackage(types.ModuleType):
    """The class of the ``explorer.collect`` package: a module that records when called."""

    def __call__(self, out_dir: str | os.PathLike[str], **options: Any) -> Collector:
        """Record the training steps of a ``with`` block into ``out_dir`` (see :class:`Collector`)."""
        return collect(out_dir, **options)


sys.modules[__name__].__class__ = CollectPackage

__all__ = ["CollectPackage", "Collector", "Terminated", "annotate", "collect"]
