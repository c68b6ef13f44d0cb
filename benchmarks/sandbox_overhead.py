"""Wall time of `hotshape eval` with and without the bubblewrap sandbox, side by side in one run.

Usage (from the repo root; out/atrex-release from `hotshape import-atrex examples/atrex-bench
--out out/atrex-release`):
    .venv/bin/python benchmarks/sandbox_overhead.py --repeats 2 \
        --out benchmarks/results/sandbox_overhead_cpu.txt

Each repeat runs the evaluator once sandboxed and once with --no-sandbox, the order alternating between
repeats (so a machine that gets busier or quieter during the run biases neither side), on the same release,
submission and device, each into its own fresh results file. The record holds every run's wall time, the
exact commands and the overhead of the sandboxed side's mean over the unsandboxed side's, in wall time and in
CPU seconds of the evaluator and everything it started (counted by a cpuacct cgroup per run, where one can be
made).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CGROUP = Path("/sys/fs/cgroup")


def eval_command(args: argparse.Namespace, out: Path, sandboxed: bool) -> list[str]:
    """The `hotshape eval` command line of one run."""
    cmd = [str(REPO / ".venv" / "bin" / "hotshape"), "eval", args.submission, "--release", args.release,
           "--device", args.device, "--out", str(out)]
    if args.ops:
        cmd += ["--ops", args.ops]
    return cmd if sandboxed else [*cmd, "--no-sandbox"]


def _cpu_cgroup() -> Path | None:
    """A fresh cpuacct (v1) or cpu (v2) cgroup to run one evaluation in, or None where none can be made. The
    sandbox's processes are reaped inside their pid namespace, so getrusage of the children misses them; a
    cgroup counts every process started from inside it."""
    own = dict(line.split(":", 2)[1:] for line in Path("/proc/self/cgroup").read_text().splitlines())
    name = f"sandbox-overhead-{os.getpid()}-{time.monotonic_ns()}"
    for base, key in ((CGROUP / "cpuacct", "cpuacct"), (CGROUP / "cpu,cpuacct", "cpu,cpuacct"), (CGROUP, "")):
        if key in own and base.is_dir():
            try:
                d = base / own[key].strip().lstrip("/") / name
                d.mkdir()
                return d
            except OSError:
                continue
    return None


def _cgroup_cpu_s(d: Path) -> float:
    if (d / "cpuacct.usage").exists():
        return int((d / "cpuacct.usage").read_text()) / 1e9
    stat = dict(line.split() for line in (d / "cpu.stat").read_text().splitlines())
    return int(stat["usage_usec"]) / 1e6


def timed_run(cmd: list[str]) -> tuple[float, float | None, int, str]:
    """(wall seconds, CPU seconds of the run and everything it started or None, exit status, last line)."""
    group = _cpu_cgroup()
    if group is not None:
        cmd = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(group / "cgroup.procs"), *cmd]
    began = time.monotonic()
    run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall_s = time.monotonic() - began
    cpu_s = None
    if group is not None:
        cpu_s = _cgroup_cpu_s(group)
        group.rmdir()
    lines = [line for line in (run.stdout + run.stderr).strip().splitlines() if "problems:" in line]
    return wall_s, cpu_s, run.returncode, lines[-1] if lines else ""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--submission", default="examples/submissions/triton_reference")
    p.add_argument("--release", default="out/atrex-release")
    p.add_argument("--device", default="cpu")
    p.add_argument("--ops", default=None, help="comma-separated operators (default: all)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", default=None, help="record file (default: print only)")
    args = p.parse_args()
    times: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float | None]] = {True: [], False: []}
    lines = []
    with tempfile.TemporaryDirectory(prefix="sandbox-overhead-") as tmp:
        for repeat in range(args.repeats):
            for sandboxed in ((True, False) if repeat % 2 == 0 else (False, True)):
                out = Path(tmp) / f"results-{repeat}-{'sandbox' if sandboxed else 'nosandbox'}.parquet"
                cmd = eval_command(args, out, sandboxed)
                wall_s, cpu_s, code, last = timed_run(cmd)
                if code != 0:
                    print(f"failed ({code}): {shlex.join(cmd)}\n{last}", file=sys.stderr)
                    return 1
                times[sandboxed].append(wall_s)
                cpu[sandboxed].append(cpu_s)
                line = (f"repeat {repeat} {'sandbox   ' if sandboxed else 'no-sandbox'} wall {wall_s:7.1f} s  "
                        f"cpu {'n/a' if cpu_s is None else f'{cpu_s:7.1f} s'}  {last}")
                lines.append(line)
                print(line, flush=True)
    mean = {k: statistics.mean(v) for k, v in times.items()}
    overhead = mean[True] / mean[False] - 1
    mean_cpu = {k: statistics.mean(v) if None not in v else None for k, v in cpu.items()}
    head = [f"# sandbox overhead on `hotshape eval` wall time ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
            f"{os.cpu_count()} CPUs, load average at the end {os.getloadavg()[0]:.1f})",
            f"# made by: .venv/bin/python benchmarks/sandbox_overhead.py {shlex.join(sys.argv[1:])}",
            f"# sandboxed run:   {shlex.join(eval_command(args, Path('RESULTS.parquet'), True))}",
            f"# unsandboxed run: {shlex.join(eval_command(args, Path('RESULTS.parquet'), False))}"]
    tail = [f"mean sandbox {mean[True]:.1f} s, no-sandbox {mean[False]:.1f} s: overhead {overhead:+.1%} "
            f"(runs alternate; min {min(times[True]):.1f} vs {min(times[False]):.1f} s)",
            "no CPU-time cgroup here" if None in mean_cpu.values() else
            f"mean CPU time sandbox {mean_cpu[True]:.1f} s, no-sandbox {mean_cpu[False]:.1f} s: "
            f"{mean_cpu[True] / mean_cpu[False] - 1:+.1%} (CPU seconds move less with the machine's other load)"]
    print("\n".join(tail))
    if args.out:
        Path(args.out).write_text("\n".join(head + lines + tail) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
