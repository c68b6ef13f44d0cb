"""A large Kineto trace derived from a real one by repeating its events: for measuring ingest's memory.

Each repetition shifts every timestamp by the source's span and every id that links events (correlation,
External id, flow id) past the ids of the repetitions before it, so the result is a valid trace whose launches
still link to their kernels and ops; the document's other fields are the source's. Written as gzip a repetition
at a time (memory: the source's events).

    python benchmarks/big_trace.py --events 3000000 --out /tmp/big-3m.json.gz
    python benchmarks/big_trace.py --events 3000000 --source benchmarks/data/qwen3-30b-a3b-moe.json.gz --out ...
    python benchmarks/big_trace.py --bomb 4294967296 --out /tmp/bomb-4g.json.gz   # one 4 GiB string, ~4 MB
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = REPO / "examples" / "traces" / "qwen3-30b-a3b" / "eager.json.gz"
_ARG_IDS = ("correlation", "External id")


def _span_and_ids(events: list) -> tuple[float, int]:
    times = [(e["ts"], e.get("dur", 0)) for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(t + (d if isinstance(d, (int, float)) else 0) for t, d in times) - min(t for t, _ in times)
    ids = [e["args"][k] for e in events if isinstance(e.get("args"), dict) for k in _ARG_IDS
           if isinstance(e["args"].get(k), int)]
    ids += [e["id"] for e in events if isinstance(e.get("id"), int)]
    return float(span) + 1.0, max(ids, default=0) + 1


def _shifted(event: dict, k: int, span: float, id_step: int) -> dict:
    if k == 0:
        return event
    out = dict(event)
    if isinstance(out.get("ts"), (int, float)):
        out["ts"] = out["ts"] + k * span
    if isinstance(out.get("id"), int):
        out["id"] = out["id"] + k * id_step
    args = out.get("args")
    if isinstance(args, dict) and any(isinstance(args.get(key), int) for key in _ARG_IDS):
        out["args"] = {**args, **{key: args[key] + k * id_step for key in _ARG_IDS if isinstance(args.get(key), int)}}
    return out


def write_big_trace(source: Path, events: int, out: Path) -> int:
    """Write a trace of at least `events` events derived from `source` to `out` (gzip); the events written."""
    doc = json.loads(gzip.decompress(source.read_bytes()))
    base = [e for e in doc["traceEvents"] if e.get("ph") != "M"]  # metadata rows once, from the source
    meta = [e for e in doc["traceEvents"] if e.get("ph") == "M"]
    span, id_step = _span_and_ids(base)
    rest = {k: v for k, v in doc.items() if k != "traceEvents"}
    written = 0
    with gzip.open(out, "wb", compresslevel=1) as f:
        f.write(b'{"traceEvents": [\n')
        first = True
        for event in meta:
            f.write((b"" if first else b",\n") + json.dumps(event).encode())
            first, written = False, written + 1
        k = 0
        while written < events:
            chunk = [json.dumps(_shifted(e, k, span, id_step)) for e in base]
            f.write((b"" if first else b",\n") + ",\n".join(chunk).encode())
            first, written, k = False, written + len(chunk), k + 1
        f.write(b"\n]")
        for key, value in rest.items():
            f.write(b", " + json.dumps(key).encode() + b": " + json.dumps(value).encode())
        f.write(b"}\n")
    return written


def write_bomb(text_bytes: int, out: Path) -> None:
    """A gzip whose text is one trace event with a name string of `text_bytes` bytes: a few MB on disk."""
    import zlib

    packer = zlib.compressobj(9, wbits=31)
    block = b"a" * 2**24
    with open(out, "wb") as f:
        f.write(packer.compress(b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "'))
        for _ in range(text_bytes // len(block)):
            f.write(packer.compress(block))
        f.write(packer.compress(b'", "ts": 1, "dur": 1}]}') + packer.flush())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bomb", type=int, help="write a gzip inflating to this many bytes (one string) instead")
    parser.add_argument("--events", type=int, help="at least this many events")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="the real trace to repeat")
    parser.add_argument("--out", type=Path, required=True, help="the .json.gz to write")
    args = parser.parse_args()
    if args.bomb:
        write_bomb(args.bomb, args.out)
        print(f"{args.out}: inflates to {args.bomb} bytes, {args.out.stat().st_size} bytes")
        return
    n = write_big_trace(args.source, args.events, args.out)
    print(f"{args.out}: {n} events from {args.source.name}, {args.out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
