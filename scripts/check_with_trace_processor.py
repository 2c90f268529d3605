#!/usr/bin/env python
"""Check an exported ``.pftrace`` with Perfetto's own trace_processor, where one is installed.

    python scripts/check_with_trace_processor.py TRACE --tp-bin /path/to/trace_processor_shell

The test suite checks every export packet by packet (``tests/export/pftrace_check.py``) because
no trace_processor binary can be installed on the project's machines; this script is the same
comparison against the real thing: the slices, flows and counter samples trace_processor
counts must equal what the exporter says it wrote. Exits 1 on a mismatch.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import explorer
from explorer.export.perfetto import to_perfetto


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--tp-bin", required=True, help="a trace_processor_shell binary")
    args = parser.parse_args()
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    trace = explorer.load(args.trace)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "tp.pftrace"
        summary = to_perfetto(trace, out)
        tp = TraceProcessor(trace=str(out), config=TraceProcessorConfig(bin_path=args.tp_bin))
        try:
            got = {
                table: int(
                    tp.query(f"select count(*) as n from {table}").as_pandas_dataframe()["n"].iat[0]
                )
                for table in ("slice", "flow", "counter")
            }
        finally:
            tp.close()
    want = {
        "slice": summary.slices + summary.instants + summary.result_slices,
        "flow": summary.flows,
        "counter": summary.counter_samples,
    }
    for table in want:
        print(f"{table:8s} exporter {want[table]:>10,}  trace_processor {got[table]:>10,}")
    return 0 if got == want else 1


if __name__ == "__main__":
    sys.exit(main())
