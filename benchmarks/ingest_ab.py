"""`hotshape ingest` of one trace by two checkouts, side by side: interleaved rounds, wall and CPU time, ratio.

Each round runs the command once from each checkout (alternating which goes first), each in a fresh process
writing a fresh store; one warm-up round is left out. Usage:

    git worktree add --detach /tmp/before <commit>
    python benchmarks/ingest_ab.py benchmarks/data/qwen3-30b-a3b-moe.json.gz --before /tmp/before --after . \
        [--rounds 15] [--env-after HOTSHAPE_PLAIN=1]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(checkout: Path, trace: Path, env: dict) -> tuple[float, float]:
    """Wall and CPU seconds of `hotshape ingest TRACE --out <fresh>` run from `checkout`."""
    with tempfile.TemporaryDirectory(prefix="hotshape-ab-") as tmp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pipelines.cli", "ingest", str(trace), "--out", f"{tmp}/store"],
                       cwd=checkout, check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(checkout), **env})
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--env-before", action="append", default=[], help="NAME=VALUE for the before runs")
    parser.add_argument("--env-after", action="append", default=[], help="NAME=VALUE for the after runs")
    args = parser.parse_args()
    envs = {"before": dict(e.split("=", 1) for e in args.env_before),
            "after": dict(e.split("=", 1) for e in args.env_after)}
    sides = {"before": args.before.resolve(), "after": args.after.resolve()}
    times: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
    loads = [os.getloadavg()[0]]
    for r in range(args.rounds + 1):
        order = ("before", "after") if r % 2 else ("after", "before")
        for side in order:
            got = run(sides[side], args.trace.resolve(), envs[side])
            if r:
                times[side].append(got)
        loads.append(os.getloadavg()[0])
    med = {side: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t)) for side, t in times.items()}
    ratios = [a[0] / b[0] for a, b in zip(times["after"], times["before"])]
    print(f"{args.trace.name}: {args.rounds} interleaved rounds, load average {min(loads):.1f}-{max(loads):.1f}")
    for side in ("before", "after"):
        print(f"  {side:6s} wall {med[side][0]:.2f} s  cpu {med[side][1]:.2f} s  ({sides[side]} {envs[side] or ''})")
    print(f"  after/before: wall {med['after'][0] / med['before'][0]:.3f} (median of per-round ratios "
          f"{statistics.median(ratios):.3f}), cpu {med['after'][1] / med['before'][1]:.3f}")


if __name__ == "__main__":
    main()
