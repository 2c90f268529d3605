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

from explorer.report.fail_on import _OPS, Rule, parse

JOB_METRICS: tuple[str, ...] = ("straggler", "collective_wait", "step_time")


def parse_job_rule(text: str) -> Rule:
    """Parse ``"straggler>10%"`` (the job's metrics); a :class:`UsageError` explains a
    malformed rule."""
    return parse(text, JOB_METRICS, "'straggler>10%'", scope="a job")


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
