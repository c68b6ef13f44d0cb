"""Ingest speed and peak memory on one large trace: hotshape vs HTA's load vs bare JSON parsing.

Each contender runs in a fresh process (so peak RSS is its own), once to warm up (its bytecode
cached, the trace in the page cache: what an installed command finds), then REPEATS times, in
rounds of one run each; the table shows the medians of wall time, CPU time and peak RSS. Usage (see
benchmarks/README.md):

    python benchmarks/ingest_vs_hta.py TRACE --hotshape-python .venv/bin/python \
        --hta-python benchmarks/.venv/bin/python [--repeats 5] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

# Each snippet reads sys.argv[1] (the trace) and does the whole job of its contender.
CONTENDERS = {
    "json.loads": (
        "hotshape",
        "import gzip, json, sys; json.loads(gzip.decompress(open(sys.argv[1], 'rb').read()))",
    ),
    "orjson.loads": (
        "hta",
        "import gzip, orjson, sys; orjson.loads(gzip.decompress(open(sys.argv[1], 'rb').read()))",
    ),
    "hotshape read+attribute": (
        "hotshape",
        "import sys; from ingest.pipeline import read_events; e = read_events(sys.argv[1]); print(e.height, file=sys.stderr)",
    ),
    "hotshape ingest_trace": (
        "hotshape",
        "import sys; from ingest.pipeline import ingest_trace; r = ingest_trace(sys.argv[1]); print(r.events.height, file=sys.stderr)",
    ),
    "hotshape ingest (CLI)": (
        "hotshape",
        # `hotshape ingest TRACE --out DIR` as the installed command runs it (its entry point, `sys.exit(main())`):
        # read, attribute, classify, write the store and its views.
        "import sys, tempfile; sys.argv = ['hotshape', 'ingest', sys.argv[1], '--out', tempfile.mkdtemp()];"
        "from pipelines.cli import main; sys.exit(main())",
    ),
    "HTA TraceAnalysis": (
        "hta",
        # HTA loads a directory of rank files; the trace is linked into a fresh one as rank 0.
        "import os, sys, tempfile, logging; logging.disable(logging.WARNING);"
        "from hta.trace_analysis import TraceAnalysis;"
        "d = tempfile.mkdtemp(); os.symlink(os.path.abspath(sys.argv[1]), os.path.join(d, 'rank-0.json.gz'));"
        "t = TraceAnalysis(trace_dir=d); print(len(t.t.get_trace(0)), file=sys.stderr)",
    ),
}


# Contenders may write their bytecode caches, as an installed package has them (pip compiles a
# wheel's modules; HTA's are): PYTHONDONTWRITEBYTECODE in the caller's environment would make every
# run of a source checkout compile its modules again.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_once(python: str, code: str, trace: Path) -> tuple[float, int, float]:
    """Wall seconds, peak RSS bytes and CPU seconds of one fresh process running `code` on `trace`."""
    start = time.perf_counter()
    proc = subprocess.Popen([python, "-c", code, str(trace)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=CHILD_ENV)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode()
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{code[:60]}... failed:\n{err}")
    return wall, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime  # Linux reports KiB


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", type=Path)
    parser.add_argument("--hotshape-python", default=sys.executable)
    parser.add_argument("--hta-python", default=None, help="python with HolisticTraceAnalysis installed")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    pythons = {"hotshape": args.hotshape_python, "hta": args.hta_python}
    raw_mb = len(__import__("gzip").decompress(args.trace.read_bytes())) / 1e6
    contenders = {name: (pythons[env], code) for name, (env, code) in CONTENDERS.items() if pythons[env] is not None}
    # Rounds of one run per contender, so that a change in the machine's load hits all of them alike.
    runs_of: dict[str, list] = {name: [] for name in contenders}
    for python, code in contenders.values():
        run_once(python, code, args.trace)  # warm-up, not counted
    uptime_before = os.getloadavg()  # 1, 5 and 15-minute load averages, as `uptime` shows them
    for _ in range(args.repeats):
        for name, (python, code) in contenders.items():
            runs_of[name].append(run_once(python, code, args.trace))
    rows = []
    for name, runs in runs_of.items():
        rows.append(
            {
                "contender": name,
                "wall_s": statistics.median(r[0] for r in runs),
                "wall_s_runs": [round(r[0], 3) for r in runs],
                "peak_rss_mb": statistics.median(r[1] for r in runs) / 1e6,
                # CPU time is what a loaded machine disturbs least; wall time is what a user waits.
                "cpu_s": statistics.median(r[2] for r in runs),
            }
        )
    uptime_after = os.getloadavg()
    load = [round(uptime_before[0], 2), round(uptime_after[0], 2)]  # 1-minute load average, before and after
    base = {r["contender"]: r for r in rows}
    print(f"trace: {args.trace} ({args.trace.stat().st_size / 1e6:.1f} MB gz, {raw_mb:.1f} MB JSON), load {load}")
    print(f"{'contender':<26}{'wall s':>8}{'cpu s':>8}{'peak RSS MB':>13}{'wall vs HTA':>13}{'cpu vs HTA':>12}")
    hta = base.get("HTA TraceAnalysis")
    for r in rows:
        wall_ratio = f"{hta['wall_s'] / r['wall_s']:.1f}x" if hta else "-"
        cpu_ratio = f"{hta['cpu_s'] / r['cpu_s']:.1f}x" if hta else "-"
        print(f"{r['contender']:<26}{r['wall_s']:>8.2f}{r['cpu_s']:>8.2f}{r['peak_rss_mb']:>13.0f}{wall_ratio:>13}{cpu_ratio:>12}")
    cli, hta_runs = runs_of.get("hotshape ingest (CLI)"), runs_of.get("HTA TraceAnalysis")
    round_ratios = [round(h[0] / c[0], 2) for h, c in zip(hta_runs, cli)] if cli and hta_runs else []
    if round_ratios:  # each round runs both once, back to back: the ratio a load change hits least
        print(f"CLI vs HTA round by round: {round_ratios} (median {statistics.median(round_ratios):.1f}x)")
    if args.json:
        doc = {"trace": str(args.trace), "json_mb": raw_mb, "repeats": args.repeats, "load_average": load,
               "cli_vs_hta_by_round": round_ratios,
               "uptime_load_before": [round(x, 2) for x in uptime_before],
               "uptime_load_after": [round(x, 2) for x in uptime_after], "rows": rows}
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
