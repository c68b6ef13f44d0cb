"""The library line of a whole release on one GPU: `hotshape baseline` (kernels_eval/library/record.py) with the
machine's versions recorded and a summary computed with pyarrow only (the GPU machine has no polars).

Usage (on the GPU machine, from the repo root, stock python3 with torch, triton, pyarrow, pyyaml; the release built
on a CPU machine by `hotshape import-atrex examples/atrex-bench --out out/atrex-release` and carried):
    HOTSHAPE_KEY_DIR=$OUT/key timeout 590 python3 benchmarks/library_baseline.py --release out/atrex-release --out $OUT/library
    python3 benchmarks/library_baseline.py --release out/atrex-release --out /tmp/lb --ops unified_attention,rms_norm

Operators run heaviest first (W_op of the latest weights), so a run cut by its limit keeps the ones that matter
most: rows are merged into `--out`/library.parquet after each operator. Writes there `library.parquet` (the baseline
rows, signed with the host key in $HOTSHAPE_KEY_DIR: carry that directory back with the results to score them
elsewhere, docs/results.md), `summary.json` (versions, each operator's path, S_op of the library, S_agg over the
covered weight, seconds) and prints a table last. Score it beside a submission with
`hotshape score RESULTS --library library.parquet --release RELEASE` (docs/library-baseline.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kernels_eval.library.record import run_baseline  # noqa: E402  (the repo root is put on the path first)


def latest_weights(release: Path) -> dict[str, float]:
    """problem_id -> weight of the release's latest weights version (pyarrow only)."""
    import pyarrow.parquet as pq

    info = json.loads((release / "release.json").read_text())
    version = max(int(w["version"]) for w in info["weights"])
    table = pq.read_table(release / "public" / "weights" / f"v{version}.parquet", columns=["problem_id", "weight"])
    return dict(zip(table.column("problem_id").to_pylist(), table.column("weight").to_pylist()))


def operator_order(release: Path, weights: dict[str, float]) -> list[str]:
    """The release's operators, heaviest W_op first."""
    import pyarrow.parquet as pq

    manifest = pq.read_table(release / "public" / "manifest.parquet", columns=["problem_id", "operator"]).to_pylist()
    w_op: dict[str, float] = {}
    for r in manifest:
        w_op[r["operator"]] = w_op.get(r["operator"], 0.0) + weights.get(r["problem_id"], 0.0)
    return sorted(w_op, key=lambda op: (-w_op[op], op))


def summarise(rows: list[dict], weights: dict[str, float]) -> dict:
    """Per operator: the path, problems correct and timed, S_op of the library (median S_lib,i over its weighted
    problems with one); the library's S_agg over the operators with an S_op (docs/library-baseline.md)."""
    ops: dict[str, list[dict]] = {}
    for r in rows:
        ops.setdefault(r["operator"], []).append(r)
    out, covered = {}, {}
    for op, rs in ops.items():
        s = [min(1.0, r["t_roofline_s"] / r["t_measured_s"]) for r in rs
             if r["correct"] and r["t_measured_s"] and r["t_roofline_s"] and weights.get(r["problem_id"], 0) > 0]
        paths = [r["baseline"] for r in rs if r["correct"]]
        w_op = sum(weights.get(r["problem_id"], 0.0) for r in rs)
        out[op] = {"W_op": w_op, "problems": len(rs), "correct": sum(bool(r["correct"]) for r in rs),
                   "timed": sum(r["t_measured_s"] is not None for r in rs),
                   "S_op_library": statistics.median(s) if s else None,
                   "path": max(set(paths), key=paths.count) if paths else None,
                   "first_error": next((r["error"] for r in rs if r["error"]), None)}
        if s:
            covered[op] = w_op
    total = sum(covered.values())
    agg = sum(w * out[op]["S_op_library"] for op, w in covered.items()) / total if total else None
    return {"S_agg_library": agg, "coverage_weight": total, "operators": out}


def versions() -> dict:
    import torch

    found = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
             "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
             "load_average": os.getloadavg()}
    for name in ("triton", "flashinfer", "vllm"):
        try:
            found[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001 - informational: not installed
            found[name] = None
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", required=True)
    parser.add_argument("--out", required=True, help="directory for library.parquet and summary.json")
    parser.add_argument("--ops", default="", help="comma list (default: every operator of the release)")
    parser.add_argument("--budget-s", type=float, default=0.15, help="timed seconds per problem")
    parser.add_argument("--sets", type=int, default=1, help="input sets the library is checked on per problem")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = parser.parse_args(argv)
    release, out = Path(args.release), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    weights = latest_weights(release)
    order = [o for o in args.ops.split(",") if o] or operator_order(release, weights)
    began = time.time()
    info = {"command": " ".join([Path(sys.executable).name, *sys.argv]), **versions()}
    print(json.dumps(info), flush=True)

    def progress(row: dict) -> None:
        t = f"{row['t_measured_s'] * 1e6:10.1f} µs" if row["t_measured_s"] else f"{'untimed':>13}"
        print(f"{time.time() - began:6.0f}s {row['operator']:<28} {row['problem_id'][:12]} {row['stage']:<11} {t}  "
              f"{row['baseline']}" + (f"  ({row['error'][:160]})" if row["error"] else ""), flush=True)

    rows = run_baseline(out / "library.parquet", release, args.device, ops=order, sets=args.sets,
                        budget_s=args.budget_s, progress=progress)
    summary = {**info, "wall_s": round(time.time() - began, 1), **summarise(rows, weights)}
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    print(f"\n{'operator':<28} {'W_op':>7} {'ok/n':>7} {'S_op lib':>9}  library path")
    for op in order:
        r = summary["operators"].get(op)
        if r is None:
            continue
        s = "n/a" if r["S_op_library"] is None else f"{r['S_op_library']:.4f}"
        print(f"{op:<28} {r['W_op']:>7.4f} {r['correct']:>3}/{r['problems']:<3} {s:>9}  "
              f"{r['path'] or 'none: ' + (r['first_error'] or '')[:120]}")
    agg = summary["S_agg_library"]
    print(f"library S_agg {'n/a' if agg is None else f'{agg:.4f}'} over {summary['coverage_weight']:.4f} of the "
          f"weight; {len(rows)} rows in {out / 'library.parquet'}; {summary['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
