"""``--fail-on`` rules: let CI fail a job when a trace crosses a limit.

A rule is ``METRIC OP VALUE[UNIT]``:

- ``METRIC`` is a finding kind (``input_stall``, ``sync_stall``, ... — its time lost, summed
  over findings of that kind), a breakdown category (``compute``, ``host_bound``, ... — per
  device; the rule fires if any device crosses), or ``step_time`` (mean step duration).
- ``OP`` is one of ``> >= < <=``.
- ``VALUE`` with ``%`` is a share of the total step time (``input_stall>10%``,
  ``compute<50%``); with ``ns``/``us``/``µs``/``ms``/``s`` it is a duration
  (``sync_stall>5ms``); a bare number is a share in percent.

Rules are evaluated on the report document (:func:`explorer.report.document`), so they see
exactly the numbers the report prints.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from explorer.analysis.breakdown import CATEGORIES
from explorer.analysis.detectors import FINDING_KINDS
from explorer.errors import UsageError

_RULE = re.compile(r"^\s*([A-Za-z_]+)\s*(>=|<=|>|<)\s*([0-9]*\.?[0-9]+)\s*(%|ns|us|µs|ms|s)?\s*$")
_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
}  # fmt: skip
_UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
METRICS: tuple[str, ...] = (*FINDING_KINDS, *CATEGORIES, "step_time")


@dataclass(frozen=True)
class Rule:
    """One parsed rule; ``percent`` says whether ``value`` is a share (0–100) or ns."""

    text: str
    metric: str
    op: str
    value: float
    percent: bool


def parse(
    text: str,
    metrics: tuple[str, ...] = METRICS,
    example: str = "'input_stall>10%' or 'sync_stall>5ms'",
    scope: str = "",
) -> Rule:
    """Parse ``"input_stall>10%"`` against ``metrics`` (a trace's, or for ``scope`` "a job"
    a job's); a :class:`UsageError` explains a malformed rule."""
    m = _RULE.match(text)
    if not m:
        raise UsageError(
            f"cannot parse --fail-on {text!r}: expected METRIC OP VALUE, e.g. {example}"
        )
    metric, op, value, unit = m.group(1), m.group(2), float(m.group(3)), m.group(4)
    if metric not in metrics:
        raise UsageError(
            f"--fail-on {text!r}: for {scope} the metric is one of {', '.join(metrics)}"
            if scope
            else f"--fail-on {text!r}: unknown metric {metric!r} (one of {', '.join(metrics)})"
        )
    if metric == "step_time" and (unit is None or unit == "%"):
        raise UsageError(f"--fail-on {text!r}: step_time needs a duration unit (ns, us, ms, s)")
    percent = unit in (None, "%")
    return Rule(text.strip(), metric, op, value if percent else value * _UNIT_NS[unit], percent)


def evaluate(rules: list[Rule], doc: dict[str, Any]) -> list[str]:
    """Messages for the rules that fire (empty: all passed)."""
    fired: list[str] = []
    total = doc["summary"]["total_ns"]
    for rule in rules:
        for where, ns in _values(rule.metric, doc):
            value = 100.0 * ns / total if rule.percent else float(ns)
            if rule.percent and total == 0:
                continue
            if _OPS[rule.op](value, rule.value):
                shown = f"{value:.2f}%" if rule.percent else f"{value / 1e6:.3f} ms"
                fired.append(f"--fail-on {rule.text}: {rule.metric}{where} is {shown}")
    return fired


def _values(metric: str, doc: dict[str, Any]) -> list[tuple[str, float]]:
    if metric == "step_time":
        return [("", float(doc["summary"]["mean_step_ns"]))]
    if metric in CATEGORIES:
        return [
            (f" on {dev}", float(c.get(metric, 0)))
            for dev, c in doc["summary"]["breakdown"].items()
        ]
    # finding kinds: all findings of the kind count, not just the --top shown
    return [("", float(doc["summary"]["time_lost_by_kind"].get(metric, 0)))]
