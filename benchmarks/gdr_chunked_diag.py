"""Diagnose the chunked path of the Triton gated_delta_rule_update on the GPU, one launch variant at a time (GPU
only to run).

Usage (on the GPU machine, from the repo root; stock python3 with torch and triton):
    PYTHONPATH=$PWD python3 benchmarks/gdr_chunked_diag.py [--variants v0,t4] [--jobs 5] [--apply]

Each variant overrides some of the submission's CHUNKED_LAUNCH settings (warps, value slices, pipelining stages of
the prepare, state and output kernels, and the output kernel's dot form: 0 tensor-core bf16 hi+lo products with
the intra-chunk part accumulated onto the inter-chunk one, 1 the same summed after, 2 fp32 FMA dots). An illegal
memory access poisons the CUDA context of its process, so every variant runs in its own child with
CUDA_LAUNCH_BLOCKING=1: a fault is then reported by the launch that caused it, and the child names that kernel.
A child that runs checks `out` and the final state against the torch reference (kernels_eval's
gated_delta_rule_update) at a catalogue shape with a partial last chunk, with the operator's tolerance, then
times the 8192-token catalogue shape (indicative: children share the GPU). One line per variant as it finishes,
then a table. --apply writes the fastest correct variant into the file (a tuning run on the GPU machine's copy).
DIAG_DEVICE=cpu dry-runs the script under Triton's interpreter on a small shape, untimed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FILE = REPO / "examples" / "submissions" / "triton_reference" / "gated_delta_rule_update.py"
MARK = "GDR_DIAG_RESULT "
KERNELS = ("gdr_chunk_prepare_kernel", "gdr_chunk_state_kernel", "gdr_chunk_output_kernel")

VARIANTS = {
    "v0": {},  # the file's own settings
    "t4": {"output_dots": 0, "output_warps": 4},
    "u4": {"output_dots": 1, "output_warps": 4},
    "u8": {"output_dots": 1, "output_warps": 8},
    "u4b16": {"output_dots": 1, "output_warps": 4, "output_block_v": 16},
    "i4": {"output_dots": 2, "output_warps": 4},
    "i8": {"output_dots": 2, "output_warps": 8},
    "i4b16": {"output_dots": 2, "output_warps": 4, "output_block_v": 16},
    "i8b16": {"output_dots": 2, "output_warps": 8, "output_block_v": 16},
}
# (batch, tokens, q heads, v heads, key dim, value dim): catalogue shapes
CHECK = (1, 130, 16, 32, 128, 128)
TIMED = (1, 8192, 16, 32, 128, 128)
DEVICE = os.environ.get("DIAG_DEVICE", "cuda")
CPU_CHECK = (1, 70, 2, 4, 16, 16)


def _inputs(shape, device):
    import torch

    from kernels_eval.operators import gated_delta_rule_update as ref

    b, t, hq, hv, kd, vd = shape
    g = torch.Generator(device=device)
    g.manual_seed(0)
    return ref.make_inputs(batch_size=b, token_count=t, num_q_heads=hq, num_v_heads=hv, key_dim=kd, value_dim=vd,
                           state_count=2, device=device, generator=g)


def child(name: str) -> dict:
    import torch

    from kernels_eval.operators import gated_delta_rule_update as ref

    if DEVICE != "cuda":
        from kernels_eval.harness.interpreter import patch_interpreter

        patch_interpreter()
    spec = importlib.util.spec_from_file_location("gdr_diag_target", FILE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.CHUNKED_LAUNCH = dict(mod.CHUNKED_LAUNCH, **VARIANTS[name])
    res = {"variant": name, "launch": mod.CHUNKED_LAUNCH}
    try:
        x = _inputs(CHECK if DEVICE == "cuda" else CPU_CHECK, DEVICE)
        want = ref.Model()(**{k: v.clone() for k, v in x.items()})
        got = mod.Model()(**x)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        errs = {}
        for key in ("out", "final_state"):
            diff = (got[key].float() - want[key].float()).abs()
            bad = diff > 2e-3 + 2e-2 * want[key].float().abs()
            errs[key] = {"max_abs": float(diff.max()), "bad": int(bad.sum())}
        res["check"] = errs
        res["correct"] = all(e["bad"] == 0 for e in errs.values())
        if DEVICE != "cuda":
            return res
        x = _inputs(TIMED, "cuda")
        model = mod.Model()
        model(**x)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            model(**x)
        end.record()
        torch.cuda.synchronize()
        res["t_8192_ms"] = start.elapsed_time(end) / 5
    except Exception as exc:  # the fault is the result
        tb = traceback.format_exc()
        res["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        res["kernel"] = next((k for k in KERNELS if k in tb.split("Traceback")[-1]), None)
        if res["kernel"] is None:
            res["kernel"] = next((k for k in reversed(KERNELS) if k in tb), None)
    return res


def run_child(name: str, timeout: float) -> dict:
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1", PYTHONPATH=str(REPO))
    if DEVICE != "cuda":
        env["TRITON_INTERPRET"] = "1"
    began = time.time()
    try:
        proc = subprocess.run([sys.executable, __file__, "--child", name], capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"variant": name, "error": f"timed out after {timeout:.0f} s"}
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            out = json.loads(line[len(MARK):])
            out["wall_s"] = round(time.time() - began, 1)
            return out
    return {"variant": name, "error": f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}"}


def apply_fastest(results: list[dict]) -> None:
    """Write the fastest correct variant's launch settings into the submission file."""
    good = [r for r in results if r.get("correct") and "t_8192_ms" in r]
    if not good:
        print("no variant is correct: the file is left as it is")
        return
    best = min(good, key=lambda r: r["t_8192_ms"])
    text = FILE.read_text()
    new = re.sub(r"CHUNKED_LAUNCH = \{.*?\}", "CHUNKED_LAUNCH = " + repr(best["launch"]), text, count=1, flags=re.S)
    FILE.write_text(new)
    print(f"applied {best['variant']}: CHUNKED_LAUNCH = {best['launch']!r}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--apply", action="store_true",
                    help="rewrite the file's CHUNKED_LAUNCH to the fastest correct variant (a tuning run)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(MARK + json.dumps(child(args.child)), flush=True)
        return
    names = args.variants.split(",")
    results = []
    with ThreadPoolExecutor(args.jobs) as pool:
        for res in pool.map(lambda n: run_child(n, args.timeout), names):
            print(json.dumps(res), flush=True)
            results.append(res)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    print(f"\n{'variant':8s} {'launch override':70s} {'verdict':12s} {'kernel / max err':32s} t8192_ms")
    for r in results:
        if "kernel" in r or "error" in r:
            verdict, detail = "fault", r.get("kernel") or r.get("error", "")[:32]
        else:
            verdict = "correct" if r.get("correct") else "wrong"
            detail = f"out {r['check']['out']['max_abs']:.2g} state {r['check']['final_state']['max_abs']:.2g}"
        t = f"{r['t_8192_ms']:.3f}" if "t_8192_ms" in r else "-"
        print(f"{r['variant']:8s} {json.dumps(VARIANTS[r['variant']]):70s} {verdict:12s} {detail!s:32s} {t}")
    if args.apply:
        apply_fastest(results)


if __name__ == "__main__":
    main()
