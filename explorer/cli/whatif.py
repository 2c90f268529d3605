"""``explorer whatif TRACE --remove input_stall --scale 'aten::mm=0.5'``: each step's time
if that were fixed, by replaying the dependency graph (:mod:`explorer.analysis.whatif`),
and the new critical path. ``explorer whatif RUN_DIR --rank K --remove input_stall``: each
rank's step of a job with the fix on rank K (:mod:`explorer.job.whatif`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from explorer.cli import options
from explorer.cli.load_warnings import print_load_warnings
from explorer.cli.progress import terminal_progress
from explorer.errors import UsageError
from explorer.units import fmt_ns

#: At most this many steps and path segments in the text output.
MAX_ROWS = 20


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = options.verb_parser(
        sub,
        "whatif",
        "predict each step's time with slices removed or sped up (replays the dependencies)",
        "Predict each step's time if what you name were fixed: the dependency graph is "
        "replayed with it removed (--remove) or sped up (--scale), every recorded "
        "dependency kept. A selector is a finding kind (input_stall, sync_stall, ...: what "
        "its fix removes), 'stream N' (the device work on stream N) or a slice name "
        "(aten::mm); what nests in it and the device work it launched go with it. On a "
        "job (a run dir of several ranks) the fix is made on --rank K and every rank's "
        "step is predicted through the collectives they share.",
    )
    options.add_trace_input(p, "trace file (.json/.json.gz) or directory")
    p.add_argument(
        "--remove", action="append", default=[], metavar="SELECTOR", help="remove these slices"
    )
    p.add_argument(
        "--scale",
        action="append",
        default=[],
        metavar="SELECTOR=FACTOR",
        help="their time times FACTOR (0 to 1), e.g. 'aten::mm=0.5' or 'stream 7=0.8'",
    )
    p.add_argument(
        "--rank",
        type=int,
        default=None,
        help="for a job (run dir): the rank the fix is made on; every rank's step is "
        "predicted through the matched collectives",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def parse_scale(items: list[str]) -> dict[str, float]:
    """``['aten::mm=0.5']`` -> ``{'aten::mm': 0.5}`` (the last ``=`` splits: a name may
    hold one); a :class:`UsageError` for one that is not ``SELECTOR=FACTOR``."""
    out: dict[str, float] = {}
    for item in items:
        sel, eq, value = item.rpartition("=")
        try:
            factor = float(value)
        except ValueError:
            factor = float("nan")
        if not eq or not sel.strip() or factor != factor:
            raise UsageError(f"--scale {item!r}: expected SELECTOR=FACTOR, e.g. 'aten::mm=0.5'")
        out[sel.strip()] = factor
    return out


def render(result: Any) -> str:
    """The text output: the changes, before/after per step, the new critical path."""
    lines = ["What if:"]
    for c in result.changes:
        how = "removed" if c.factor == 0 else f"x{c.factor:g}"
        lines.append(f"  {c.selector}: {how} ({c.count} slices)")
    st = result.steps
    lines.append("")
    lines.append(f"{'step':>6}  {'before':>10}  {'after':>10}  {'saving':>10}")
    for r in st.head(MAX_ROWS).itertuples():
        pct = 100 * r.saving_ns / r.before_ns if r.before_ns else 0.0
        mark = "  (partial)" if r.partial else ""
        lines.append(
            f"{r.step:>6}  {fmt_ns(r.before_ns):>10}  {fmt_ns(r.after_ns):>10}  "
            f"{fmt_ns(r.saving_ns):>10} ({pct:.0f}%){mark}"
        )
    if len(st) > MAX_ROWS:
        lines.append(f"  ... {len(st) - MAX_ROWS} more steps (use --json)")
    whole = st[~st["partial"]] if (~st["partial"]).any() else st
    before, after = int(whole["before_ns"].sum()), int(whole["after_ns"].sum())
    if len(whole):
        pct = 100 * (before - after) / before if before else 0.0
        lines.append(
            f"mean step {fmt_ns(before / len(whole))} -> {fmt_ns(after / len(whole))} (-{pct:.1f}%)"
        )
    path = result.path
    if path is not None and path.length_ns:
        lines.append("")
        lines.append(f"New critical path ({path.scope}, {fmt_ns(path.length_ns)}):")
        for r in path.summary[path.summary["ns"] > 0].itertuples():
            lines.append(
                f"  {r.category:<16} {fmt_ns(r.ns):>10} ({100 * r.ns / path.length_ns:.0f}%)"
            )
        if len(path.top_ops):
            lines.append("  most path time: " + ", ".join(
                f"{r.name} {fmt_ns(r.ns)}" for r in path.top_ops.head(5).itertuples()
            ))  # fmt: skip
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    import explorer

    scale = parse_scale(args.scale)
    if not args.remove and not scale:
        raise UsageError("name what to change: --remove SELECTOR and/or --scale SELECTOR=FACTOR")
    from explorer.job import is_job

    if is_job(args.trace):
        return _run_job(args, scale)
    if args.rank is not None:
        raise UsageError(
            f"--rank is for a job (a run dir of several ranks): {args.trace} is one trace"
        )
    trace = explorer.load(
        args.trace, use_cache=not args.no_cache, progress=terminal_progress(source=args.trace)
    )
    result = trace.what_if(remove=args.remove, scale=scale)
    if args.json:
        json.dump(result.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render(result))
    print_load_warnings(trace)
    return 0


def _run_job(args: argparse.Namespace, scale: dict[str, float]) -> int:
    """A job: the change on one rank, every rank's step through the matched collectives
    (:mod:`explorer.job.whatif`)."""
    from explorer.job.run_dir import job_files
    from explorer.job.whatif import job_what_if

    if scale:
        raise UsageError("--scale is for a single trace: on a job, name the fix with --remove")
    files = job_files(args.trace)
    if args.rank is None:
        raise UsageError(
            f"{args.trace} is a job: name the rank the fix is made on, --rank K (ranks: "
            f"{', '.join(str(r) for r, _ in files)}; 'explorer report' names the straggler)"
        )
    result = job_what_if(files, args.rank, args.remove, use_cache=not args.no_cache)
    if args.json:
        out = result.to_dict()
        out["steady_steps"] = result.steady_steps
        out["steps"] = [
            {"rank": int(r.rank), "step": int(r.step), "before_ns": int(r.before_ns),
             "after_ns": int(r.after_ns)}
            for r in result.steps.itertuples()
        ]  # fmt: skip
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    table = result.steps.pivot(index="step", columns="rank", values="after_ns")
    before = result.steps.pivot(index="step", columns="rank", values="before_ns")
    ranks = [int(c) for c in table.columns]
    lines = [result.line(), "", "step  " + "  ".join(f"{'rank ' + str(r):>21}" for r in ranks)]
    for step in table.index[:MAX_ROWS]:
        cells = [
            f"{fmt_ns(before.at[step, r]):>9} -> {fmt_ns(table.at[step, r]):>9}" for r in ranks
        ]
        lines.append(f"{int(step):>4}  " + "  ".join(f"{c:>21}" for c in cells))
    print("\n".join(lines))
    return 0
