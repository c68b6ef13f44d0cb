"""One GPU vs N GPUs of the same machine: the release's evaluation of the Triton reference (440 problems on the
catalogue release) through `hotshape eval`'s own path (kernels_eval.eval_commands.evaluate_to), once on one
device and once sharded over `--devices`; then verdict identity, timings and wall time compared. Both runs
compile cold (no persistent Triton cache: EvalConfig.triton_cache None), so the second is not warmed by the first.

Usage (on a machine with N GPUs, from the repo root; each line fits a 10-minute command limit, and a cut run is
continued by the same line: rows are journalled as they are judged and --resume'd):
    python benchmarks/eval_multi_gpu.py run --mode single --release out/atrex-release --out $OUT
    python benchmarks/eval_multi_gpu.py run --mode multi --devices all --release out/atrex-release --out $OUT
    python benchmarks/eval_multi_gpu.py compare --out $OUT
Run under `timeout 590` and repeat a `run` line until it prints `complete`; `--ops a,b` narrows both runs to
operators that fit in one command. Writes under $OUT/multi_gpu/: single.parquet, multi.parquet (signed results,
multi's rows with their device_index), walls.jsonl (per invocation: mode, devices, rows judged and the wall
seconds up to its last row, which a cut invocation keeps), compare.json and compare.txt. Done when (issue 23):
wall(multi) <= 0.55 x wall(single) on two GPUs (1.1 / N on N), identical verdicts, timings within 3%.

Imports only torch, triton, numpy, pyarrow, pyyaml and kernels_eval.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SUBMISSION = REPO / "examples" / "submissions" / "triton_reference"
VERDICT = ("stage", "compiled", "correct", "native")
TIMING_TOLERANCE = 0.03


def _dir(out: str) -> Path:
    path = Path(out) / "multi_gpu"
    path.mkdir(parents=True, exist_ok=True)
    return path


def run(args: argparse.Namespace) -> int:
    """Evaluate (or continue evaluating) one mode's results file; one walls.jsonl line per judged row."""
    import torch
    import triton  # noqa: F401 - the workers import it: fail here, before a run, where it is missing

    from kernels_eval.eval_commands import evaluate_to
    from kernels_eval.harness.release_view import read_release_view
    from kernels_eval.harness.runner import EvalConfig, detect_hardware
    from kernels_eval.harness.shard import parse_devices

    out = _dir(args.out)
    release = read_release_view(args.release)
    ops = [o for o in args.ops.split(",") if o] if args.ops else None
    devices = parse_devices(args.devices, torch.cuda.device_count()) if args.mode == "multi" else None
    hardware = detect_hardware("cuda", release.hardware_names)
    config = EvalConfig(memory_cgroup=False, device="cuda", hardware=hardware)
    results = out / f"{args.mode}.parquet"
    wanted = sum(1 for r in release.problems if ops is None or r["operator"] in ops)
    if results.exists() and pq.read_table(results).num_rows >= wanted:
        print(f"{args.mode}: complete ({results})")
        return 0
    began = time.monotonic()
    judged = [0]

    def heard(row: dict) -> None:  # after each kept row: a cut invocation's wall up to its last row stays
        judged[0] += 1
        with open(out / "walls.jsonl", "a") as fh:
            fh.write(json.dumps({"mode": args.mode, "devices": devices, "pid": os.getpid(), "rows": judged[0],
                                 "wall_s": time.monotonic() - began}) + "\n")

    recorded = evaluate_to(results, SUBMISSION, release, config, ops=ops, progress=heard, resume=True,
                           devices=devices)
    print(f"{args.mode}: complete: {len(recorded.rows)} rows ({recorded.resumed} from a cut invocation) in "
          f"{time.monotonic() - began:.1f} s -> {results}")
    return 0


def walls(path: Path) -> dict[str, float]:
    """mode → wall seconds: per invocation its last line's wall_s, summed over invocations."""
    last: dict[tuple[str, int], float] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            last[(entry["mode"], entry["pid"])] = float(entry["wall_s"])
    total: dict[str, float] = {}
    for (mode, _), seconds in last.items():
        total[mode] = total.get(mode, 0.0) + seconds
    return total


def compare(args: argparse.Namespace) -> int:
    """compare.json / compare.txt of single vs multi; exit 1 when a criterion fails."""
    out = _dir(args.out)
    single = {r["problem_id"]: r for r in pq.read_table(out / "single.parquet").to_pylist()}
    multi_rows = pq.read_table(out / "multi.parquet").to_pylist()
    multi = {r["problem_id"]: r for r in multi_rows}
    once = len(multi_rows) == len(multi)
    differ = sorted(p for p in single.keys() & multi.keys()
                    if tuple(single[p][k] for k in VERDICT) != tuple(multi[p][k] for k in VERDICT))
    timed = sorted(p for p in single.keys() & multi.keys() if single[p]["t_measured_s"] and multi[p]["t_measured_s"])
    ratios = np.array([multi[p]["t_measured_s"] / single[p]["t_measured_s"] for p in timed])
    deviation = np.abs(ratios - 1) if len(ratios) else np.array([0.0])
    geomean = float(np.exp(np.mean(np.log(ratios)))) if len(ratios) else None
    wall = walls(out / "walls.jsonl")
    n_devices = len({r["device_index"] for r in multi_rows if r.get("device_index") is not None})
    wall_ratio = wall["multi"] / wall["single"] if wall.get("single") and wall.get("multi") else None
    report = {
        "problems_single": len(single), "problems_multi": len(multi), "each_problem_once": once,
        "same_problems": single.keys() == multi.keys(), "verdicts_differ": differ,
        "devices_used": n_devices, "rows_per_device": _count(r.get("device_index") for r in multi_rows),
        "timed_both": len(timed), "timing_ratio_geomean": geomean,
        "timing_ratio_median": float(np.median(ratios)) if len(ratios) else None,
        "timing_within_3pct_fraction": float(np.mean(deviation <= TIMING_TOLERANCE)),
        "timing_worst": sorted(((float(d), p) for d, p in zip(deviation, timed)), reverse=True)[:10],
        "wall_single_s": wall.get("single"), "wall_multi_s": wall.get("multi"), "wall_ratio": wall_ratio,
        "wall_ratio_target": 1.1 / max(n_devices, 1),
        "eval_s_single": sum(r["eval_s"] or 0.0 for r in single.values()),
        "eval_s_multi": sum(r["eval_s"] or 0.0 for r in multi.values()),
    }
    report["pass"] = bool(once and report["same_problems"] and not differ and geomean is not None
                          and abs(geomean - 1) <= TIMING_TOLERANCE and report["timing_ratio_median"] is not None
                          and abs(report["timing_ratio_median"] - 1) <= TIMING_TOLERANCE
                          and wall_ratio is not None and wall_ratio <= report["wall_ratio_target"])
    (out / "compare.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    lines = [f"problems: single {len(single)}, multi {len(multi)} on {n_devices} devices "
             f"({report['rows_per_device']}); each once: {once}",
             f"verdicts differ: {len(differ)} {differ[:10]}",
             f"timings (multi / single, {len(timed)} problems): geomean {geomean}, median "
             f"{report['timing_ratio_median']}, within 3%: {report['timing_within_3pct_fraction']:.1%}",
             f"wall: single {wall.get('single')} s, multi {wall.get('multi')} s, ratio {wall_ratio} "
             f"(target <= {report['wall_ratio_target']:.3f})", f"pass: {report['pass']}"]
    (out / "compare.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if report["pass"] else 1


def _count(values) -> dict:
    counts: dict = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: str(kv[0])))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--mode", choices=("single", "multi"), required=True)
    r.add_argument("--release", required=True)
    r.add_argument("--devices", default="all", help="multi: CUDA indices or 'all'")
    r.add_argument("--ops", default=None, help="comma-separated operators (default: every one in the release)")
    r.add_argument("--out", required=True)
    r.set_defaults(func=run)
    c = sub.add_parser("compare")
    c.add_argument("--out", required=True)
    c.set_defaults(func=compare)
    args = parser.parse_args()
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
