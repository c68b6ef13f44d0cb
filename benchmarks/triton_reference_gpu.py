"""Time the Triton reference submission against the PyTorch references on the catalogue shapes (GPU only).

Usage (on the GPU machine, from the repo root):
    python benchmarks/triton_reference_gpu.py --atrex-dir examples/atrex-bench/data \
        --out benchmarks/results/triton_reference_H200.csv
    python benchmarks/triton_reference_gpu.py --atrex-dir DIR --ops rms_norm,gemm --out /tmp/part.csv

For each operator file in --submission and each shape of <atrex-dir>/<op>/shapes.json (gemm, which the
catalogue lacks, uses GEMM_SHAPES below): draw input sets with the reference's make_inputs, check the
Triton output against the reference on the first set (the evaluator's judge, kernels_eval.harness.compare),
then time both with triton.testing.do_bench (median, L2 flushed before every call, rotating input sets so
no call finds its inputs in L2). Roofline numbers come from catalogue.roofline.problem_roofline on
--hardware. One CSV row per shape; a failing shape is recorded and the run goes on.

Imports only torch, triton, numpy and the repo's kernels_eval modules.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
import triton

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernels_eval import registry  # noqa: E402
from kernels_eval.harness.compare import compare_outputs, named_outputs  # noqa: E402
from catalogue.roofline import problem_roofline  # noqa: E402

SUBMISSION = REPO / "examples" / "submissions" / "triton_reference"
ROTATION_BYTES = 1 << 30  # input bytes held across the rotating sets
MAX_SETS = 8

# gemm is not in the Atrex catalogue: square prefill sizes, decode-like skinny M and fp8 variants.
GEMM_SHAPES = {str(i): {"init_kwargs": {"scaling": s},
                        "input_kwargs": {"m": m, "n": n, "k": k, "dtype": d, "scaling": s}}
               for i, (m, n, k, d, s) in enumerate((
                   (8192, 8192, 8192, "bf16", "none"), (4096, 4096, 4096, "bf16", "none"),
                   (2048, 7168, 2048, "bf16", "none"), (16384, 4096, 14336, "bf16", "none"),
                   (128, 4096, 4096, "bf16", "none"), (16, 7168, 2048, "bf16", "none"),
                   (1, 4096, 4096, "bf16", "none"), (4096, 4096, 4096, "fp16", "none"),
                   (8192, 8192, 8192, "fp8_e4m3", "per_tensor"), (4096, 4096, 4096, "fp8_e4m3", "per_row"),
                   (64, 7168, 2048, "fp8_e4m3", "per_row")))}

FIELDS = ["operator", "shape_id", "status", "error", "correct", "max_err", "t_triton_s", "t_torch_s", "speedup",
          "bytes", "flops", "path", "t_roofline_s", "t_roofline_measured_s", "roofline_fraction",
          "measured_roofline_fraction", "achieved_gbps", "achieved_tflops", "sets", "init_kwargs", "input_kwargs"]


def load_candidate(op: str, submission: Path):
    spec = importlib.util.spec_from_file_location(f"triton_reference_{op}", submission / f"{op}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shapes_of(op: str, atrex_dir: Path) -> dict:
    path = atrex_dir / op / "shapes.json"
    if path.is_file():
        return json.loads(path.read_text())
    if op == "gemm":
        return GEMM_SHAPES
    raise FileNotFoundError(f"{path} not found")


def tensor_bytes(inputs: dict) -> int:
    return sum(t.numel() * t.element_size() for t in inputs.values() if isinstance(t, torch.Tensor))


def make_sets(ref, input_kwargs: dict, seed: int, device: str) -> list[dict]:
    """Rotating input sets: as many as fit in ROTATION_BYTES (at least 1, at most MAX_SETS)."""
    first = ref.make_inputs(**input_kwargs, device=device, generator=torch.Generator(device=device).manual_seed(seed))
    n = int(max(1, min(MAX_SETS, ROTATION_BYTES // max(tensor_bytes(first), 1))))
    sets = [first]
    for j in range(1, n):
        g = torch.Generator(device=device).manual_seed(seed + j)
        sets.append(ref.make_inputs(**input_kwargs, device=device, generator=g))
    return sets


def bench(model, sets: list[dict], device: str) -> float:
    """Median seconds per call over rotating sets (do_bench flushes L2 before each call). On --device cpu
    (a plumbing check under TRITON_INTERPRET=1) one wall-clock call, which means nothing."""
    counter = [0]

    def call():
        inputs = sets[counter[0] % len(sets)]
        counter[0] += 1
        model(**inputs)

    with torch.no_grad():
        if device == "cpu":
            t0 = time.perf_counter()
            call()
            return time.perf_counter() - t0
        ms = triton.testing.do_bench(call, warmup=25, rep=100, return_mode="median")
    return ms / 1e3


def run_shape(op: str, sid: str, shape: dict, candidate, hardware: str, seed: int, check: bool,
              device: str = "cuda") -> dict:
    init, input_kwargs = shape.get("init_kwargs") or {}, shape.get("input_kwargs") or {}
    spec = registry.spec(op)
    row = {"operator": op, "shape_id": sid, "status": "ok", "error": "",
           "init_kwargs": json.dumps(init, sort_keys=True), "input_kwargs": json.dumps(input_kwargs, sort_keys=True)}
    roof = problem_roofline(op, init, input_kwargs, hardware)
    row.update({k: roof[k] for k in ("bytes", "flops", "path", "t_roofline_s", "t_roofline_measured_s")})
    ref_mod = registry.load_reference(op)
    reference, model = ref_mod.Model(**init).to(device), candidate.Model(**init)
    if isinstance(model, torch.nn.Module):
        model = model.to(device)
    sets = make_sets(ref_mod, input_kwargs, seed, device)
    row["sets"] = len(sets)
    if check:
        with torch.no_grad():
            # the reference never mutates its inputs; the candidate may (in-place contracts), so it runs second
            expected = named_outputs(reference(**sets[0]), spec.outputs)
            got = named_outputs(model(**sets[0]), spec.outputs)
        failures, max_err = compare_outputs(got, expected, spec.tolerance, spec.order_free_outputs)
        row.update(correct=not failures, max_err=max_err)
        if failures:
            row["error"] = "; ".join(failures)[:500]
        del expected, got
    t_tri = bench(model, sets, device)
    if device == "cuda":
        torch.cuda.empty_cache()
    t_ref = bench(reference, sets, device)
    row.update(t_triton_s=t_tri, t_torch_s=t_ref, speedup=t_ref / t_tri)
    row["roofline_fraction"] = min(1.0, roof["t_roofline_s"] / t_tri)
    if roof["t_roofline_measured_s"]:
        row["measured_roofline_fraction"] = min(1.0, roof["t_roofline_measured_s"] / t_tri)
    row["achieved_gbps"] = roof["bytes"] / t_tri / 1e9
    row["achieved_tflops"] = roof["flops"] / t_tri / 1e12
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--atrex-dir", required=True, type=Path, help="atrex-bench data dir (<op>/shapes.json)")
    ap.add_argument("--out", required=True, type=Path, help="CSV to write")
    ap.add_argument("--submission", type=Path, default=SUBMISSION)
    ap.add_argument("--ops", default=None, help="comma-separated operators (default: every file in --submission)")
    ap.add_argument("--shapes", default=None, help="comma-separated shape ids (default: all)")
    ap.add_argument("--hardware", default="H200")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-check", action="store_true", help="skip the correctness check (timing only)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cpu: check the script's plumbing under TRITON_INTERPRET=1 on small --shapes (no timing)")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("needs a CUDA GPU (or --device cpu with TRITON_INTERPRET=1 for a plumbing check)", file=sys.stderr)
        return 2
    if args.device == "cpu":  # the evaluator's interpreter shims (autotuner without a GPU driver)
        from kernels_eval.harness.interpreter import patch_interpreter

        patch_interpreter()
    known = set(registry.operator_names())
    ops = ([o.strip() for o in args.ops.split(",") if o.strip()] if args.ops else
           sorted(p.stem for p in args.submission.glob("*.py") if p.stem in known))
    wanted = set(args.shapes.split(",")) if args.shapes else None
    rows = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for op in ops:
        candidate = load_candidate(op, args.submission)
        for sid, shape in sorted(shapes_of(op, args.atrex_dir).items(), key=lambda kv: int(kv[0])):
            if wanted and sid not in wanted:
                continue
            t0 = time.perf_counter()
            try:
                row = run_shape(op, sid, shape, candidate, args.hardware, args.seed, not args.no_check, args.device)
            except Exception as exc:  # noqa: BLE001 - a failing shape is recorded, the run goes on
                row = {"operator": op, "shape_id": sid, "status": "error",
                       "error": f"{type(exc).__name__}: {exc}"[:500],
                       "input_kwargs": json.dumps(shape.get("input_kwargs"), sort_keys=True)}
                traceback.print_exc(limit=3)
            if args.device == "cuda":
                torch.cuda.empty_cache()
            rows.append(row)
            print(f"{op:<28} {sid:>3} {row['status']:<5} correct={row.get('correct', '-')!s:<5} "
                  f"triton={_us(row.get('t_triton_s'))} torch={_us(row.get('t_torch_s'))} "
                  f"roofline={_pct(row.get('roofline_fraction'))} "
                  f"measured={_pct(row.get('measured_roofline_fraction'))} "
                  f"{row.get('achieved_gbps') or 0:7.0f} GB/s  ({time.perf_counter() - t0:.1f}s) {row['error'][:80]}",
                  flush=True)
            with args.out.open("w", newline="") as f:  # rewritten after every shape: a crash keeps the rows so far
                w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
                w.writeheader()
                w.writerows(rows)
    print_summary(rows)
    print(f"wrote {len(rows)} rows to {args.out}")
    return 0


def print_summary(rows: list[dict]) -> None:
    print(f"\n{'operator':<28} {'shapes':>6} {'ok':>4} {'correct':>7} {'median roof':>11} {'min roof':>8} "
          f"{'median meas':>11} {'largest-shape meas':>18} {'median speedup':>14}")
    by_op: dict[str, list[dict]] = {}
    for r in rows:
        by_op.setdefault(r["operator"], []).append(r)
    for op, rs in by_op.items():
        ok = [r for r in rs if r["status"] == "ok"]
        roof = [r["roofline_fraction"] for r in ok]
        meas = [r["measured_roofline_fraction"] for r in ok if r.get("measured_roofline_fraction") is not None]
        largest = max(ok, key=lambda r: r["bytes"], default=None)
        print(f"{op:<28} {len(rs):>6} {len(ok):>4} {sum(bool(r.get('correct')) for r in ok):>7} "
              f"{_pct(statistics.median(roof) if roof else None):>11} {_pct(min(roof) if roof else None):>8} "
              f"{_pct(statistics.median(meas) if meas else None):>11} "
              f"{_pct(largest.get('measured_roofline_fraction') if largest else None):>18} "
              f"{(statistics.median(r['speedup'] for r in ok) if ok else float('nan')):>13.2f}x")


def _us(s) -> str:
    return f"{s * 1e6:9.1f}us" if s else "        -  "


def _pct(x) -> str:
    return f"{x:6.1%}" if x is not None else "     -"


if __name__ == "__main__":
    sys.exit(main())
