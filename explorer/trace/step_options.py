"""Which host annotations are a trace's steps: the options a user gives (``--steps``,
``--step-nesting``), checked when given.

Standard library only: a command line checks them before anything is loaded, and a repeat
report keys its stored document by them without importing the model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from explorer.errors import UsageError

#: Which step annotations count when they nest (an inner ``forward`` inside an outer one).
STEP_NESTINGS: tuple[str, ...] = ("outermost", "innermost")


def step_regex(pattern: str) -> re.Pattern[str]:
    """A user's step pattern compiled, or a :class:`UsageError` that says why it is not one."""
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise UsageError(
            f"step pattern {pattern!r} is not a valid regular expression: {exc}"
        ) from None


@dataclass(frozen=True)
class StepOptions:
    """Which host annotations are a trace's steps, as a value the single-trace and the
    job routes pass alike: ``pattern`` a regex (None: ``ProfilerStep#N``, else the whole
    trace), ``nesting`` which of nested matches count (:data:`STEP_NESTINGS`). A bad
    pattern or nesting is a :class:`UsageError` when the value is made."""

    pattern: str | None = None
    nesting: str = "outermost"

    def __post_init__(self) -> None:
        if self.pattern is not None:
            step_regex(self.pattern)
        if self.nesting not in STEP_NESTINGS:
            raise UsageError(
                f"step nesting {self.nesting!r} is not one of {', '.join(STEP_NESTINGS)}"
            )


__all__ = ["STEP_NESTINGS", "StepOptions", "step_regex"]
