"""protobuf's upb backend against ``explorer/export/protowire.py`` for the Perfetto export.

Issue 27 asks whether the maintained protobuf runtime (``protobuf`` ≥ 4 runs on upb, C)
writes the slice packets as fast as Explorer's own numpy wire encoder. Measured in one run
on the 1M-event benchmark trace (``big_trace.py``), slices per second, medians:

* ``protowire``: :func:`explorer.export.to_perfetto` without Explorer's result rows — the
  whole export (descriptors, interning, slices, flows, instants, counters) — and, within
  it, the time its packet encoder takes (``perfetto._write_events``: every slice's begin
  and end with all their fields, annotations and flow ids, the instants and counters);
* ``upb, one message per packet``: a ``TracePacket`` per begin and end, serialised each;
* ``upb, one Trace message``: every packet appended to one ``Trace`` and serialised once
  (upb's best case: the encoding loop in C), with the same fields as protowire's slices
  (timestamp, sequence id, type, track uuid, interned name and category ids).

The upb writers build only the slice packets (a fraction of what the export writes), on a
prefix of ``--slices`` slices; rates are per slice, so the comparison favours upb.

    python benchmarks/protobuf_backend.py [--events 1000000] [--slices 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from google.protobuf.internal import api_implementation
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from big_trace import make_big_trace  # noqa: E402

import explorer  # noqa: E402
from explorer.export import perfetto, to_perfetto  # noqa: E402
from explorer.export.results import Results  # noqa: E402


def _columns(trace: explorer.Trace, limit: int) -> tuple[list[int], ...]:
    sl = trace.slices.iloc[:limit]
    start = int(trace.metadata.get("start_ns", 0))
    ts = sl["ts"].to_numpy(np.int64) + start
    return (
        ts.tolist(),
        (ts + sl["dur"].to_numpy(np.int64)).tolist(),
        (sl["track"].to_numpy(np.int64) + 1).tolist(),
        (sl["name"].cat.codes.to_numpy(np.int64) + 1).tolist(),
        (sl["cat"].cat.codes.to_numpy(np.int64) + 1).tolist(),
    )


def upb_per_packet(cols: tuple[list[int], ...], path: Path) -> None:
    with open(path, "wb") as f:
        for t, e, u, name, cat in zip(*cols, strict=True):
            for stamp, kind in ((t, 1), (e, 2)):
                p = pb.TracePacket(timestamp=stamp, trusted_packet_sequence_id=1)
                p.track_event.type = kind
                p.track_event.track_uuid = u
                if kind == 1:
                    p.track_event.name_iid = name
                    p.track_event.category_iids.append(cat)
                data = p.SerializeToString()
                f.write(b"\n" + _varint(len(data)) + data)


def upb_one_message(cols: tuple[list[int], ...], path: Path) -> None:
    trace = pb.Trace()
    add = trace.packet.add
    for t, e, u, name, cat in zip(*cols, strict=True):
        p = add(timestamp=t, trusted_packet_sequence_id=1)
        p.track_event.type = 1
        p.track_event.track_uuid = u
        p.track_event.name_iid = name
        p.track_event.category_iids.append(cat)
        q = add(timestamp=e, trusted_packet_sequence_id=1)
        q.track_event.type = 2
        q.track_event.track_uuid = u
    path.write_bytes(trace.SerializeToString())


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
    ap.add_argument("--slices", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "explorer-bench"))
    a = ap.parse_args()
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    src = make_big_trace(work / f"big_{a.events}.json", a.events)
    trace = explorer.load(src)
    n = len(trace.slices)
    print(f"protobuf backend: {api_implementation.Type()}; {n:,} slices")
    rates: dict[str, list[float]] = {}
    cols = _columns(trace, a.slices)
    k = len(cols[0])
    encoder = perfetto._write_events
    spent = [0.0]

    def timed_encoder(*args: object) -> object:
        t = time.perf_counter()
        try:
            return encoder(*args)  # type: ignore[arg-type]
        finally:
            spent[0] += time.perf_counter() - t

    perfetto._write_events = timed_encoder  # type: ignore[assignment]
    for _ in range(a.repeat):
        spent[0] = 0.0
        t = time.perf_counter()
        to_perfetto(trace, work / "protowire.pftrace", results=Results())
        rates.setdefault("protowire (whole export)", []).append(n / (time.perf_counter() - t))
        rates.setdefault("protowire (its packet encoder)", []).append(n / spent[0])
        t = time.perf_counter()
        upb_per_packet(cols, work / "upb1.pftrace")
        rates.setdefault("upb, one message per packet", []).append(k / (time.perf_counter() - t))
        t = time.perf_counter()
        upb_one_message(cols, work / "upb2.pftrace")
        rates.setdefault("upb, one Trace message", []).append(k / (time.perf_counter() - t))
    best = statistics.median(rates["protowire (its packet encoder)"])
    for name, values in rates.items():
        med = statistics.median(values)
        print(f"{name:32s} {med:12,.0f} slices/s  {best / med:5.2f}x the encoder's time")


if __name__ == "__main__":
    main()
