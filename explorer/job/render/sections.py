"""The job report's one section list, as the report :class:`~explorer.report.document.
Document` every report builds: the formats of :mod:`explorer.report.formats` render it,
none computes.

:func:`sections` builds the sections — a heading, a few lines of prose and a table of
strings each — from the job document (:mod:`explorer.job.document`), so every format shows
the same numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from explorer.job.straggler import MIN_SHARE as STRAGGLER_MIN_SHARE
from explorer.job.whatif import whatif_line
from explorer.report.document import Chart, Document, Section, Table
from explorer.units import fmt_bytes, fmt_ns, fmt_rate

#: Rank × step matrix: at most this many step columns (the first ones).
MAX_STEP_COLUMNS = 12
#: Collectives listed one by one: the ones that made others wait most.
TOP_COLLECTIVES = 15
#: Ranks listed one by one (a 1,000-rank job lists its worst by wait caused).
MAX_RANK_ROWS = 64


def where(c: dict[str, Any]) -> str:
    """``file.py:24 (fn)`` for a cause or finding with a source line, else ``""``; a
    cause's context line follows (``file.py:24 (fn), from :107 (main)``)."""
    if not c.get("file") or int(c.get("line", -1)) < 0:
        return ""
    fn = f" ({c['function']})" if c.get("function") else ""
    out = f"{Path(c['file']).name}:{c['line']}{fn}"
    if c.get("context_file") and int(c.get("context_line", -1)) >= 0:
        same = c["context_file"] == c["file"]
        name = "" if same else Path(c["context_file"]).name
        cfn = f" ({c['context_function']})" if c.get("context_function") else ""
        out += f", from {name}:{c['context_line']}{cfn}"
    return out


def headline(doc: dict[str, Any]) -> str:
    """The one sentence a user reads first."""
    s = doc["straggler"]
    if s is None:
        im = doc.get("imbalance") or {}
        late_share = doc["summary"]["max_late_share"]
        if im.get("worst_rank") is not None and late_share >= STRAGGLER_MIN_SHARE:
            return (
                "Imbalance without a consistent straggler: the ranks' own time per step "
                f"spreads {fmt_ns(im['spread_ns_per_step'])}; the latest, rank "
                f"{im['worst_rank']}, is typically {100 * late_share:.1f}% of a step behind, "
                f"but {im['reason']}."
            )
        return (
            "No straggler: no rank holds the others back much more than the rest (the latest "
            f"is typically {100 * late_share:.1f}% of a step behind the others)."
        )
    others = doc["ranks_present"] - 1
    causes = (
        "; ".join(
            f"{_cause_name(c, s['rank'])} {fmt_ns(c['excess_ns_per_step'])}/step"
            + (f" at {where(c)}" if where(c) else "")
            for c in s["causes"]
        )
        or "no finding or category of its own accounts for it"
    )
    waits = ", ".join(s["waits_in"]) or "collectives"
    return (
        f"rank {s['rank']}: {causes}; "
        + (f"the other {others} ranks wait" if others != 1 else "the other rank waits")
        + f" {fmt_ns(s['others_wait_ns_per_step'])}/step in {waits} "
        f"({100 * s['share']:.0f}% of their step time)."
    )


def _cause_name(c: dict[str, Any], rank: int) -> str:
    """A cause as the headline names it: its kind, or for uneven work what is uneven
    ("its batch is 3× the others' (input shape [96, …] vs [32, …] in aten::linear),")."""
    mine = f"rank {rank}'s "
    if c["what"] == "uneven_work" and str(c["title"]).startswith(mine):
        return f"its {str(c['title'])[len(mine) :]},"
    return str(c["what"]).replace("_", " ")


def sections(doc: dict[str, Any]) -> list[Section]:
    out = [
        _overview(doc),
        _straggler(doc),
        _matrix(doc),
        _ranks(doc),
        _by_op(doc),
        _collectives(doc),
    ]
    if doc["warnings"]:
        out.append(Section("warnings", "Warnings", lead=list(doc["warnings"])))
    return out


def title(doc: dict[str, Any]) -> str:
    return f"Explorer job report — {doc['run']}"


def job_report(doc: dict[str, Any]) -> Document:
    """The job report of ``doc`` (:func:`explorer.job.job_document`) as a document."""
    return Document(
        title="Explorer job report", subject=str(doc["run"]), sections=sections(doc), data=doc
    )


def _table(header: list[str], rows: list[list[str]], numeric: set[int]) -> list[Table]:
    """The section's one table (none when it has no rows)."""
    return [Table(header, rows, frozenset(numeric))] if rows else []


def _overview(doc: dict[str, Any]) -> Section:
    s = doc["summary"]
    lines = [
        f"{doc['ranks_present']} ranks (world size {doc['world_size']}), {len(doc['steps'])} "
        f"steps, mean step {fmt_ns(s['mean_step_ns'])}; ranks wait "
        f"{100 * s['collective_wait_share']:.1f}% of their step time in collectives.",
        headline(doc),
    ]
    if doc["warnings"]:  # a rank cut short, a rank missing: said beside the verdict too
        n = len(doc["warnings"])
        lines.append(
            f"Read the {n} warning{'s' if n != 1 else ''} under Warnings before trusting these "
            f"figures; the first: {doc['warnings'][0]}"
        )
    sentence = (doc.get("devices") or {}).get("sentence")
    if sentence:
        lines.insert(1, str(sentence))
    if doc["synthetic"]:
        lines.insert(0, "SYNTHETIC: these traces were generated, not measured.")
    return Section("summary", "Summary", lead=lines)


def _straggler(doc: dict[str, Any]) -> Section:
    s = doc["straggler"]
    if s is None:
        return Section(
            "straggler", "Straggler", lead=["None: the ranks arrive at their collectives together."]
        )
    steps = ", ".join(str(x) for x in s["steps"]) or "none on its own"
    start = doc["summary"].get("startup_steps") or []
    apart = (
        f" Start-up step{'s' if len(start) > 1 else ''} {', '.join(str(x) for x in start)} "
        "(first loader start, compile) are left out of these figures."
        if start
        else ""
    )
    rows = [
        [c["title"], fmt_ns(c["rank_ns_per_step"]), fmt_ns(c["others_ns_per_step"]),
         fmt_ns(c["excess_ns_per_step"]), where(c)]
        for c in s["causes"]
    ]  # fmt: skip
    return Section(
        "straggler",
        f"Straggler: rank {s['rank']}",
        lead=[f"Late in steps {steps}; the others wait in {', '.join(s['waits_in'])}.{apart}"]
        + ([whatif_line(s["whatif"])] if s.get("whatif") else []),
        tables=_table(
            ["why", "rank " + str(s["rank"]), "other ranks (median)", "extra / step", "where"],
            rows,
            {1, 2, 3},
        ),
    )


def _matrix(doc: dict[str, Any]) -> Section:
    steps = doc["steps"][:MAX_STEP_COLUMNS]
    lines = []
    if len(doc["steps"]) > len(steps):
        lines.append(f"First {len(steps)} of {len(doc['steps'])} steps.")
    late = doc["straggler"]["rank"] if doc["straggler"] else None
    rows, grid, tips = [], [], []
    for r, durs in list(doc["step_matrix"].items())[:MAX_RANK_ROWS]:
        label = f"{r} (straggler)" if late is not None and int(r) == late else r
        rows.append([label, *["" if d is None else fmt_ns(d) for d in durs[: len(steps)]]])
        grid.append([None if d is None else float(d) for d in durs[: len(steps)]])
        tips.append([f"rank {r}, step {s}: {c}" for s, c in zip(steps, rows[-1][1:], strict=True)])
    header = ["rank", *[f"step {s}" for s in steps]]
    heat = Chart(
        "heatmap",
        "",
        grid=grid,
        grid_tips=tips,
        row_labels=[f"rank {row[0]}" for row in rows],
        column_labels=[f"step {s}" for s in steps],
    )
    return Section(
        "step_matrix",
        "Step time by rank",
        lead=lines,
        tables=_table(header, rows, set(range(1, len(steps) + 1))),
        charts=[heat] if grid else [],
    )


def _ranks(doc: dict[str, Any]) -> Section:
    lines = [
        "Late / step: the rank's own time (outside collective waits) beyond the other "
        "ranks', median over steps: what the others typically wait for it.",
        "Comm hidden: the share of the rank's communication time during which compute "
        "ran too (on the host: on another thread).",
        "Clock offset: how much each rank's clock was shifted to align collective ends "
        "(ranks on one machine share its clock and are shifted together).",
    ]
    header = ["rank", "step time", "waits / step", "late / step",
              "clock offset", "compute", "communication", "comm hidden", "top finding"]  # fmt: skip
    rows = []
    ranks = sorted(doc["ranks"], key=lambda r: -r["late_ns_per_step"])[:MAX_RANK_ROWS]
    for r in sorted(ranks, key=lambda r: r["rank"]):
        total = max(r["total_ns"], 1)
        n = max(r["steps"], 1)  # per step: a sum over steps is no step time
        bd = r["breakdown"]
        top = r["top_findings"][0] if r["top_findings"] else None
        rows.append(
            [str(r["rank"]), fmt_ns(r["total_ns"] / n),
             f"{fmt_ns(r['wait_ns'] / n)} ({100 * r['wait_ns'] / total:.0f}%)",
             fmt_ns(max(r["late_ns_per_step"], 0)), fmt_ns(r["clock_offset_ns"]),
             f"{100 * bd.get('compute', 0) / total:.0f}%",
             f"{100 * bd.get('communication', 0) / total:.0f}%",
             f"{100 * r['comm_overlap_ns'] / r['comm_ns']:.0f}%" if r["comm_ns"] else "",
             "" if top is None else f"{top['kind']} {fmt_ns(top['time_lost_ns'])}"]
        )  # fmt: skip
    return Section("ranks", "Ranks", lead=lines, tables=_table(header, rows, {1, 2, 3, 4, 5, 6, 7}))


def _by_op(doc: dict[str, Any]) -> Section:
    c = doc["collectives"]
    rows = [
        [r["op"], str(r["count"]), fmt_bytes(r["bytes"]) if r["bytes"] else "?",
         fmt_ns(r["dur_ns"]), fmt_ns(r["wait_ns"]), fmt_ns(r["transfer_ns"])]
        for r in c["by_op"]
    ]  # fmt: skip
    return Section(
        "collectives_by_op",
        "Collectives by operation",
        lead=[f"{c['matched']} matched across ranks, {c['unmatched']} seen on one rank only."],
        tables=_table(
            ["op", "count", "bytes", "time (all ranks)", "waiting", "moving data"],
            rows,
            {1, 2, 3, 4, 5},
        ),
    )


def _collectives(doc: dict[str, Any]) -> Section:
    top = sorted(doc["collectives"]["rows"], key=lambda r: -r["caused_wait_ns"])[:TOP_COLLECTIVES]
    rows = []
    for r in sorted(top, key=lambda r: r["start_ns"]):
        bw = r["busbw_gbps"]
        rows.append(
            [r["op"], "" if r["step"] is None else str(r["step"]),
             fmt_bytes(r["bytes"]) if r["bytes"] > 0 else "?", fmt_ns(r["skew_ns"]),
             fmt_ns(r["dur_ns"]), fmt_ns(r["wait_ns"]), fmt_ns(r["transfer_ns"]),
             f"rank {r['last_rank']}", fmt_rate(None if bw is None else bw * 1e9)]
        )  # fmt: skip
    header = ["op", "step", "bytes", "skew", "time", "wait (mean)", "transfer", "last in",
              "bus bw"]  # fmt: skip
    return Section(
        "collectives",
        "Collectives that made ranks wait most",
        tables=_table(header, rows, {1, 2, 3, 4, 5, 6, 8}),
    )
