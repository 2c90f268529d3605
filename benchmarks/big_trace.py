"""Build a ≥1M-event trace for benchmarks by repeating a real trace in time.

The base is a real NVIDIA training trace from ``../shared/traces`` (distributed rank with
NCCL, memcpy, fwd/bwd flows): the figures in ``benchmarks/README.md`` are measured on it.
Without that folder the script stops with a clear message rather than silently measuring
something else; ``--base TRACE`` builds from another real trace on purpose. Each copy is shifted past the previous one's end, and its correlation,
External ids and flow ids are offset so launches and flows stay one-to-one, so the result
has the structure of a real long capture. Nothing here is synthetic data presented as
measured: the output's ``traceName`` says it is a repetition and of what.

    python benchmarks/big_trace.py OUT.json [--events 1000000] [--base TRACE]
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[1]
SHARED_BASE = ROOT.parent / "shared" / "traces" / "nccl_parser_config__nccl_data.json.gz"

_ID_ARGS = ("correlation", "External id", "Sequence number")


def base_trace() -> Path:
    """The shared NVIDIA trace the README's figures are measured on, or a clear exit."""
    if not SHARED_BASE.exists():
        raise SystemExit(
            f"benchmarks: the base trace {SHARED_BASE} is absent (../shared/traces is not part "
            "of a clone); the README's figures are measured on it. Build from another real "
            "trace on purpose with: python benchmarks/big_trace.py OUT.json --base TRACE"
        )
    return SHARED_BASE


def make_big_trace(path: str | Path, n_events: int = 1_000_000, base: Path | None = None) -> Path:
    """Write (once; reused when it exists with the same size request) a trace of at least
    ``n_events`` events to ``path`` (uncompressed JSON) and return the path."""
    out = Path(path)
    stamp = out.with_suffix(out.suffix + ".events")
    if out.exists() and stamp.exists() and stamp.read_text() == str(n_events):
        return out
    base = base or base_trace()
    raw = base.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = msgspec.json.decode(raw)
    events = doc.pop("traceEvents")
    meta_events = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    ts = [e["ts"] for e in body if isinstance(e.get("ts"), (int, float))]
    t0, t1 = (
        min(ts),
        max(e["ts"] + e.get("dur", 0) for e in body if isinstance(e.get("ts"), (int, float))),
    )
    period = (t1 - t0) * 1.01 + 10.0
    copies = -(-n_events // max(len(body), 1))
    id_step = 10 ** len(str(max(len(body), 1) * 100))
    enc = msgspec.json.Encoder()
    doc["traceName"] = f"{base.name} repeated {copies}x in time (benchmark input)"
    tmp = out.with_suffix(out.suffix + ".tmp")
    with open(tmp, "wb") as f:
        head = enc.encode(doc)
        f.write(head[:-1] + (b',"traceEvents":[' if len(doc) else b'{"traceEvents":['))
        f.write(b",".join(enc.encode(e) for e in meta_events))
        sep = b"," if meta_events else b""
        for k in range(copies):
            shift = k * period
            chunk = []
            for e in body:
                e2 = dict(e)
                if isinstance(e2.get("ts"), (int, float)):
                    e2["ts"] = e2["ts"] + shift
                if k and "id" in e2 and isinstance(e2["id"], int):
                    e2["id"] = e2["id"] + k * id_step
                a = e2.get("args")
                if k and isinstance(a, dict) and any(x in a for x in _ID_ARGS):
                    a = dict(a)
                    for x in _ID_ARGS:
                        if isinstance(a.get(x), int) and a[x] >= 0:
                            a[x] = a[x] + k * id_step
                    e2["args"] = a
                chunk.append(enc.encode(e2))
            f.write(sep + b",".join(chunk))
            sep = b","
        f.write(b"]}")
    tmp.replace(out)
    stamp.write_text(str(n_events))
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--base", type=Path, default=None, help="a real trace to repeat instead")
    a = ap.parse_args()
    p = make_big_trace(a.out, a.events, a.base)
    print(f"{p} ({p.stat().st_size / 1e6:.0f} MB)", file=sys.stderr)
