"""``compile``: time the device waits while dynamo/inductor compile, plus graph breaks and
recompilations with their reasons and lines.

Measured as the breakdown's ``host_compile`` reason. The collector's ``explorer_compile``
events carry ``event`` (``compile``/``graph_break``/``recompile``) and ``reason``; their
counts and reasons go into ``details``. A trace with graph breaks or recompilations gets
this finding even when the compile time itself is small, because each break splits the
graph for every later step.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import PurePath
from typing import Any

import numpy as np

from explorer.analysis.classify import classes
from explorer.analysis.detectors.context import MAX_EVIDENCE, Context, Measured
from explorer.analysis.finding import Finding
from explorer.units import fmt_ns, shorten

#: What this detector reports and the breakdown reasons it reads (checked by the registry).
KIND = "compile"
REASONS: tuple[str, ...] = ("host_compile",)


def detect(ctx: Context) -> list[Finding]:
    m = ctx.measure("host_compile")
    comp = classes(ctx.trace).compile
    ids = np.flatnonzero(ctx.trace.kind_in("compile"))
    events: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    sentences: dict[str, None] = {}  # ordered set: the same break seen every step says once
    for i in ids[:5000]:  # collector compile events are few (one per compile/break)
        a = ctx.trace.args(int(i))
        events[str(a.get("event", "compile"))] += 1
        if a.get("reason"):
            reasons[str(a["reason"])] += 1
        said = why_sentence(a)
        if said:
            sentences[said] = None
    breaks = events.get("graph_break", 0) + events.get("recompile", 0)
    if not ctx.significant(m) and breaks == 0:
        return []
    if m is None:
        m = Measured(next(iter(ctx.timelines)), "host_compile", np.zeros(len(ctx.steps), np.int64),
                     np.zeros((0, 2), np.int64))  # fmt: skip
    parts = []
    if events.get("graph_break"):
        parts.append(f"{events['graph_break']} graph break(s)")
    if events.get("recompile"):
        parts.append(f"{events['recompile']} recompilation(s)")
    title = f"Compilation: {fmt_ns(m.total)} compiling" + (f", {', '.join(parts)}" if parts else "")
    who = (
        f"{m.device} idles for {fmt_ns(m.total)}"
        if ctx.device_mode
        else f"The host spends {fmt_ns(m.total)}"
    )
    explanation = " ".join(
        [f"{who} while torch.compile traces and compiles on the host.", *list(sentences)[:3]]
    )
    recommendation = (
        "Warm up before measuring (compile once, outside the timed steps); fix graph breaks "
        "(torch._dynamo.explain, TORCH_LOGS=graph_breaks); avoid recompiles by marking dynamic "
        "dimensions (torch._dynamo.mark_dynamic / dynamic=True) and keeping Python scalars out "
        "of guarded inputs."
    )
    f = ctx.finding(
        KIND, m, comp, title, explanation, recommendation,
        details={"events": dict(events), "reasons": dict(reasons.most_common(10))},
    )  # fmt: skip
    if not f.evidence:
        f.evidence = [int(i) for i in np.flatnonzero(comp)[:MAX_EVIDENCE]]
        from explorer.analysis.attribution import top_lines

        f.source_lines = top_lines(ctx.trace, np.flatnonzero(comp))
    return [f]


_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<fn>\w+?)_at_(?P<line>\d+)$")
_GUARD = re.compile(r"^\s*\d+/\d+:\s*(?P<guard>[^#\n]*?)\s*(?:#|$)", re.M)
_FLOAT = re.compile(r"-?\d+\.\d{5,}(?:e-?\d+)?")


def why_sentence(args: dict[str, Any]) -> str:
    """One sentence for a graph break or recompilation event of the collector: what broke
    (or which guard failed), in which frame, at which file:line ("" for a plain compile).

    Dynamo's texts are long (hints, debug context, guard dumps with source lines and paths
    cut to a width); the sentence keeps their first statement and the guard expression."""
    event = str(args.get("event", ""))
    if event not in ("graph_break", "recompile"):
        return ""
    where = _where(args)
    frame = _frame(str(args.get("frame") or args.get("source_function") or ""))
    text = str(args.get("reason") or "")
    if event == "graph_break":
        first = text.strip().splitlines()[0].strip().rstrip(".") if text.strip() else ""
        what = f": {first}" if first else ""
        return f"The graph breaks in {frame}{where}{what}."
    m = _GUARD.search(text)
    guard = _FLOAT.sub(lambda f: f"{float(f.group()):.4g}", m.group("guard")) if m else ""
    guard = shorten(guard, 80)
    because = f" because the guard `{guard}` failed (a value it was specialised on changed)"
    return f"{frame[0].upper()}{frame[1:]} is recompiled{where}{because if guard else ''}."


def _where(args: dict[str, Any]) -> str:
    file, line = args.get("source_file"), args.get("source_line")
    return f" at {PurePath(str(file)).name}:{line}" if file and isinstance(line, int) else ""


def _frame(name: str) -> str:
    """``forward`` → ``forward()``; dynamo's resume functions → what they are."""
    m = _RESUME.match(name)
    if m:
        return f"the rest of {m.group('fn')}() after the break at line {m.group('line')}"
    return f"{name}()" if name else "a compiled frame"
