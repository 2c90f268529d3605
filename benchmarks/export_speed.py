"""Export speed, size and memory on a ≥1M-event trace.

Measures, in one run on the same loaded trace:

- the full export, as ``explorer export`` writes it and the README describes it (the
  trace plus the Findings row, the Critical path row's runs and the flows where the path
  crosses tracks), its size and what the results add to the plain export: once on a freshly
  loaded trace, so the analyses it needs are computed inside the timing, then the median
  of ``--repeat`` runs with them already computed;
- ``to_perfetto`` slices/s with Explorer's own rows left out (the exporter alone);
- a baseline measured here: the obvious writer that builds one ``TracePacket`` protobuf
  object per begin/end and serialises it, on a prefix of the same slices (its rate is per
  slice, so the ratio is fair);
- ``.pftrace`` size over the uncompressed JSON it came from (target ≤ 0.5);
- peak memory the export allocates on top of the loaded trace (tracemalloc; numpy reports
  its buffers to it), against the size of the file written — a writer that held the
  whole trace as protobuf objects would need several times the file size;
- ``to_chrome`` time and size for comparison.

    python benchmarks/export_speed.py [--events 1000000] [--repeat 3] [--workdir DIR]

The input is the lead's ``big_trace.py``: a real trace repeated in time (not synthetic).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from big_trace import make_big_trace  # noqa: E402

import explorer  # noqa: E402
from explorer.export import to_chrome, to_perfetto  # noqa: E402
from explorer.export.results import Results  # noqa: E402


def naive_protobuf_writer(trace: explorer.Trace, path: Path, limit: int) -> int:
    """One protobuf object per packet, names inline: the straightforward approach."""
    sl = trace.slices.iloc[:limit]
    start = int(trace.metadata["start_ns"])
    names = sl["name"].astype(str).tolist()
    cats = sl["cat"].astype(str).tolist()
    ts = (sl["ts"].to_numpy() + start).tolist()
    ends = (sl["ts"].to_numpy() + sl["dur"].to_numpy() + start).tolist()
    tracks = (sl["track"].to_numpy() + 1).tolist()
    with open(path, "wb") as f:
        for name, cat, t, e, u in zip(names, cats, ts, ends, tracks, strict=True):
            for stamp, kind in ((t, 1), (e, 2)):
                p = pb.TracePacket(timestamp=stamp, trusted_packet_sequence_id=1)
                p.track_event.type = kind
                p.track_event.track_uuid = u
                if kind == 1:
                    p.track_event.name = name
                    p.track_event.categories.append(cat)
                data = p.SerializeToString()
                f.write(b"\n" + _varint(len(data)) + data)
    return len(sl)


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "explorer-bench"))
    a = ap.parse_args()
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    src = make_big_trace(work / f"big_{a.events}.json", a.events)
    t = time.perf_counter()
    trace = explorer.load(src)
    print(
        f"input: {src} ({src.stat().st_size / 1e6:.0f} MB JSON), loaded in {time.perf_counter() - t:.1f} s"
    )
    n = len(trace.slices)
    print(f"slices: {n:,}  flows: {len(trace.flows):,}  tracks: {len(trace.tracks)}")

    full_out = work / "big_with_results.pftrace"
    t, c = time.perf_counter(), time.process_time()
    full = to_perfetto(trace, full_out)
    full_first, full_first_cpu = time.perf_counter() - t, time.process_time() - c
    full_times, full_cpu = [], []
    for _ in range(a.repeat):
        t, c = time.perf_counter(), time.process_time()
        to_perfetto(trace, full_out)
        full_times.append(time.perf_counter() - t)
        full_cpu.append(time.process_time() - c)
    full_med, full_cpu_med = statistics.median(full_times), statistics.median(full_cpu)
    print(
        f"full export (findings + critical path runs + the path's cross-track flows, "
        f"{full.result_slices:,} result slices, {full.flows:,} flows, "
        f"{full.bytes / 1e6:.1f} MB): first {full_first:.2f} s ({full_first_cpu:.2f} s CPU) on a fresh trace "
        f"-> {n / full_first:,.0f} slices/s, {n / full_first_cpu:,.0f} per CPU-second "
        "(computing findings, dependency graph and critical path included: what an export "
        "without a report before it pays); "
        f"median {full_med:.2f} s ({full_cpu_med:.2f} s CPU) over {a.repeat} more -> "
        f"{n / full_med:,.0f} slices/s, {n / full_cpu_med:,.0f} per CPU-second"
    )

    out = work / "big.pftrace"
    times, cpu = [], []
    for _ in range(a.repeat + 1):
        t, c = time.perf_counter(), time.process_time()
        summary = to_perfetto(trace, out, results=Results())
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    first, rest = times[0], times[1:]
    med = statistics.median(rest)
    rate = n / med
    cpu_med = statistics.median(cpu[1:])
    print(
        f"to_perfetto without Explorer's rows: first run {first:.2f} s ({n / first:,.0f} slices/s)"
    )
    print(
        f"to_perfetto: median {med:.2f} s over {a.repeat} more runs -> {rate:,.0f} slices/s "
        f"(target >= 300,000) [runs: {', '.join(f'{x:.2f}' for x in rest)}]"
    )
    print(
        f"to_perfetto: median CPU time {cpu_med:.2f} s -> {n / cpu_med:,.0f} slices per CPU-second "
        "(wall time on this shared machine also counts other people's processes)"
    )
    ratio = out.stat().st_size / src.stat().st_size
    print(
        f"size: {out.stat().st_size / 1e6:.1f} MB pftrace / {src.stat().st_size / 1e6:.1f} MB JSON "
        f"= {ratio:.3f} (target <= 0.5); overlap rows added: {summary.lane_tracks}"
    )

    limit = min(n, 100_000)
    t = time.perf_counter()
    naive_protobuf_writer(trace, work / "naive.pftrace", limit)
    naive_rate = limit / (time.perf_counter() - t)
    rate = n / times[-1]  # the run just before the baseline, so both see similar load
    print(
        f"baseline (one protobuf object per packet, no args/flows): {naive_rate:,.0f} slices/s "
        f"-> Explorer is {rate / naive_rate:.1f}x faster while writing more"
    )

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    to_perfetto(trace, out, results=Results())
    peak = tracemalloc.get_traced_memory()[1] - before
    tracemalloc.stop()
    print(
        f"peak memory allocated during export: {peak / 1e6:.0f} MB "
        f"({peak / out.stat().st_size:.2f}x the file written; the trace's slices table is "
        f"{trace.slices.memory_usage(deep=False).sum() / 1e6:.0f} MB)"
    )

    chrome = work / "big_export.json"
    t = time.perf_counter()
    to_chrome(trace, chrome, results=Results())
    dt = time.perf_counter() - t
    print(f"to_chrome: {dt:.2f} s -> {n / dt:,.0f} slices/s, {chrome.stat().st_size / 1e6:.0f} MB")
    assert np.isfinite(rate)


if __name__ == "__main__":
    main()
