"""Peak memory of `hotshape ingest` of one trace: the command in a fresh process, its peak RSS from the kernel.

    python benchmarks/ingest_memory.py TRACE [TRACE...]   # one line per trace: events, text bytes, peak RSS, wall

benchmarks/big_trace.py writes large valid traces to measure; benchmarks/README.md records the figures.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def peak_rss(command: list[str], env: dict | None = None) -> tuple[int, float, subprocess.CompletedProcess]:
    """Peak RSS in bytes of `command` run to its end in a fresh process (its children included), its wall time
    in seconds and what it printed. Run from a process of its own: RUSAGE_CHILDREN keeps the largest child."""
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})
    wall = time.perf_counter() - start
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, wall, proc


def measure(trace: Path, env: dict | None = None) -> dict:
    """peak RSS of `hotshape ingest TRACE --out <a fresh store>` (measured in a child process of its own)."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from benchmarks.ingest_memory import peak_rss; "
            "rss, wall, p = peak_rss([sys.executable, '-m', 'pipelines.cli', 'ingest', sys.argv[2], '--out', "
            "sys.argv[3]]); print(json.dumps({'rss': rss, 'wall': wall, 'rc': p.returncode, 'err': p.stderr}))")
    with tempfile.TemporaryDirectory(prefix="hotshape-memory-") as tmp:
        out = subprocess.run([sys.executable, "-c", code, str(REPO), str(trace), f"{tmp}/store"], capture_output=True,
                             text=True, check=True, env={**os.environ, **(env or {})}).stdout
    import json

    return json.loads(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("traces", nargs="+", type=Path)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    for trace in args.traces:
        m = measure(trace)
        last = m["err"].strip().splitlines()[-1:] if m["err"].strip() else []
        print(f"{trace.name}: exit {m['rc']}, peak RSS {m['rss'] / 2**20:.0f} MiB, {m['wall']:.1f} s"
              + (f"; {last[0]}" if last else ""))


if __name__ == "__main__":
    main()
