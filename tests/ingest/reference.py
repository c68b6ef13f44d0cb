"""An independent, brute-force reading of Kineto traces that the fast reader is checked against.

Exact decimal arithmetic on the JSON text (stdlib json with Decimal floats), no sweeps, no
caches: slow and obviously right, so it can only be used on fixture-sized traces.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

GPU = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
LAUNCH = {"cuda_runtime", "cuda_driver", "Runtime"}
RANGES = {"cpu_op", "Operator", "user_annotation"}


def load_exact(path: Path) -> dict:
    """The trace parsed with every float kept as its exact decimal text."""
    with gzip.open(path, "rt") as fh:
        return json.load(fh, parse_float=Decimal)


def ns(value) -> int:
    """Decimal/int µs as integer ns, exactly."""
    return int(Decimal(value) * 1000)


def gpu_events(doc: dict) -> list[dict]:
    """Every GPU activity (complete events of the GPU categories)."""
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in GPU]


def total_gpu_ns(doc: dict) -> int:
    """Σ duration of all GPU activity, in ns."""
    return sum(ns(e["dur"]) for e in gpu_events(doc))


def expected_chains(doc: dict) -> dict[int, list[str]]:
    """correlation -> names of the CPU ranges enclosing its launch row, outermost first."""
    return {c: [r["name"] for r in ranges] for c, ranges in expected_enclosing(doc).items()}


def expected_enclosing(doc: dict) -> dict[int, list[dict]]:
    """correlation -> the CPU range events enclosing its launch row, outermost first."""
    base = int(doc.get("baseTimeNanoseconds", 0))
    launches = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in LAUNCH and "correlation" in e.get("args", {}):
            launches[e["args"]["correlation"]] = e
    by_thread = defaultdict(list)
    for index, e in enumerate(doc["traceEvents"]):
        if e.get("ph") == "X" and e.get("cat") in RANGES:
            by_thread[(e.get("pid"), e.get("tid"))].append((index, e))
    chains = {}
    for correlation in {e.get("args", {}).get("correlation") for e in gpu_events(doc)}:
        launch = launches.get(correlation)
        if launch is None:
            continue
        t = base + ns(launch["ts"])
        enclosing = []
        for index, r in by_thread[(launch.get("pid"), launch.get("tid"))]:
            start = base + ns(r["ts"])
            end = start + ns(r["dur"])
            if start <= t < end:
                enclosing.append((start, -end, index, r))
        chains[correlation] = [r for *_, r in sorted(enclosing, key=lambda e: e[:3])]
    return chains
