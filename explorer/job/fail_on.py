"""``--fail-on`` rules for a job report (the single-rank rules live in
:mod:`explorer.report.fail_on`; the rule syntax is the same).

Job metrics, each a share of the step time (``%``) or a duration:

- ``straggler``: the time the other ranks lose waiting for the worst rank, per other rank
  (``straggler>10%`` fires when any rank makes the others wait more than 10% of their step);
- ``collective_wait``: the time ranks spend waiting for each other in collectives, averaged
  over ranks;
- ``step_time``: the mean step duration (a duration only).
"""

from __future__ import annotations

from typing import Any

from explorer.errors import UsageError
from explorer.report.fail_on import _OPS, _RULE, _UNIT_NS, Rule

JOB_METRICS: tuple[str, ...] = ("straggler", "collective_wait", "step_time")


def parse_job_rule(text: str) -> Rule:
    """Parse ``"straggler>10%"``; a :class:`UsageError` explains a malformed rule."""
    m = _RULE.match(text)
    if not m:
        raise UsageError(
            f"cannot parse --fail-on {text!r}: expected METRIC OP VALUE, e.g. 'straggler>10%'"
        )
    metric, op, value, unit = m.group(1), m.group(2), float(m.group(3)), m.group(4)
    if metric not in JOB_METRICS:
        raise UsageError(
            f"--fail-on {text!r}: for a job the metric is one of {', '.join(JOB_METRICS)}"
        )
    percent = unit in (None, "%")
    if metric == "step_time" and percent:
        raise UsageError(f"--fail-on {text!r}: step_time needs a duration unit (ns, us, ms, s)")
    return Rule(text.strip(), metric, op, value if percent else value * _UNIT_NS[unit], percent)


def evaluate_job(rules: list[Rule], doc: dict[str, Any]) -> list[str]:
    """Messages for the rules that fire on the job document (empty: all passed)."""
    s = doc["summary"]
    mean_step = float(s["mean_step_ns"])
    shares = {"straggler": s["straggler_share"], "collective_wait": s["collective_wait_share"]}
    fired = []
    for rule in rules:
        if rule.metric == "step_time":
            value = mean_step
        else:
            value = 100.0 * shares[rule.metric] if rule.percent else shares[rule.metric] * mean_step
        if _OPS[rule.op](value, rule.value):
            shown = f"{value:.2f}%" if rule.percent else f"{value / 1e6:.3f} ms"
            who = ""
            if rule.metric == "straggler" and s["straggler_rank"] is not None:
                who = f" (rank {s['straggler_rank']})"
            fired.append(f"--fail-on {rule.text}: {rule.metric}{who} is {shown}")
    return fired
