"""Diagnose the Triton attention_forward kernel on the GPU one autotune config at a time (GPU only to run).

Usage (on the GPU machine, from the repo root; stock python3 with torch and triton):
    python3 benchmarks/attention_diag.py
    python3 benchmarks/attention_diag.py --file CANDIDATE.py   # another form of the kernel, e.g. a variant
    python3 benchmarks/attention_diag.py --shapes d72_h16_8184 --configs 0,3 --wrap compute-sanitizer

The autotuner is bypassed: for each config of the file's `attention_forward_kernel` (an Autotuner) its
JITFunction is launched directly with that config's BLOCK_* constexprs, num_warps and num_stages, through the
file's own Model.forward (the module's kernel name is swapped for a one-config launcher, so the Model computes
its grid and arguments as in the real run). An illegal memory access poisons the CUDA context of its process,
so every (config, shape) pair runs in its own child process; children run a few at a time. Each child checks
the output against torch.nn.functional.scaled_dot_product_attention per sequence (fp32 inputs; GQA heads
repeated) with the spec's tolerance (atol = rtol = 2e-2) and times a few calls (indicative only: children
share the GPU; --jobs 1 for clean numbers). One line per (config, shape) as it finishes, then a table.
Budget: under a minute on an H200 (mostly process starts and Triton compiles, in parallel).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_FILE = REPO / "examples" / "submissions" / "triton_reference" / "attention_forward.py"
MARK = "ATTN_DIAG_RESULT "
ATOL = RTOL = 2e-2

# name: (num_q_heads, num_kv_heads, head_dim, seq_lens)
SHAPES = {
    "small_gqa": (4, 2, 72, [5, 130, 0, 67]),  # GQA, an empty sequence, partial tiles
    "d72_h16_8184": (16, 16, 72, [8184]),  # a catalogue shape (vision encoder, D = 72)
    "d72_h16_multi": (16, 16, 72, [3000, 77, 4096, 1011]),  # several sequences in one launch
    "d128_h32_4096": (32, 32, 128, [4096]),  # D = 128: a power of two, no padding or tail tile
}


def _load(path: str, name: str = "attn_diag_target"):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _config_kwargs(config) -> dict:
    if hasattr(config, "all_kwargs"):
        return dict(config.all_kwargs())
    out = dict(config.kwargs)
    out.update({k: getattr(config, k) for k in ("num_warps", "num_stages", "num_ctas") if getattr(config, k, None)})
    return out


def _config_label(config) -> str:
    kw = _config_kwargs(config)
    tiles = "x".join(str(v) for k, v in sorted(config.kwargs.items()) if k.startswith("BLOCK"))
    return f"{tiles} w{kw.get('num_warps')} s{kw.get('num_stages')}"


class _OneConfig:
    """Stands in for the Autotuner: kernel[grid](*args, **kw) launches the JITFunction with one config."""

    def __init__(self, fn, kwargs: dict) -> None:
        self.fn, self.kwargs = fn, kwargs

    def __getitem__(self, grid):
        return lambda *args, **kw: self.fn[grid](*args, **kw, **self.kwargs)


def _child(args) -> dict:
    import torch
    import torch.nn.functional as F

    if args.device == "cpu":  # testing this script under TRITON_INTERPRET=1: the evaluator's interpreter shims
        sys.path.insert(0, str(REPO))
        from kernels_eval.harness.interpreter import patch_interpreter

        patch_interpreter()
    hq, hkv, d, lens = SHAPES[args.shape]
    out = {"config": args.config, "shape": args.shape, "status": "error", "error": "", "max_abs_err": None,
           "ms": None, "tflops": None}
    try:
        module = _load(args.file)
        tuner = module.attention_forward_kernel
        config = tuner.configs[args.config]
        out["label"] = _config_label(config)
        module.attention_forward_kernel = _OneConfig(tuner.fn, _config_kwargs(config))
        dev = args.device
        g = torch.Generator(device=dev).manual_seed(0)
        total = sum(lens)
        q = torch.randn((total, hq, d), device=dev, dtype=torch.bfloat16, generator=g)
        k = torch.randn((total, hkv, d), device=dev, dtype=torch.bfloat16, generator=g)
        v = torch.randn((total, hkv, d), device=dev, dtype=torch.bfloat16, generator=g)
        cu = [0]
        for n in lens:
            cu.append(cu[-1] + n)
        cu_q = torch.tensor(cu, dtype=torch.int32, device=dev)
        model = module.Model()
        stage = "first call"
        got = model(q, k, v, cu_q, cu_q.clone())
        if dev == "cuda":
            torch.cuda.synchronize()
        stage = "reference"
        worst, bad = 0.0, 0
        for s in range(len(lens)):
            a, b = cu[s], cu[s + 1]
            if a == b:
                continue
            qs = q[a:b].float().transpose(0, 1)[None]
            ks = k[a:b].float().repeat_interleave(hq // hkv, dim=1).transpose(0, 1)[None]
            vs = v[a:b].float().repeat_interleave(hq // hkv, dim=1).transpose(0, 1)[None]
            ref = F.scaled_dot_product_attention(qs, ks, vs, scale=d ** -0.5)[0].transpose(0, 1)
            diff = (got[a:b].float() - ref).abs()
            worst = max(worst, float(diff.max()))
            bad += int((diff > ATOL + RTOL * ref.abs()).sum()) + int((~torch.isfinite(got[a:b])).sum())
        out["max_abs_err"] = worst
        stage = "timing"
        times = []
        for _ in range(5 if dev == "cuda" else 0):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(q, k, v, cu_q, cu_q)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        if times:
            out["ms"] = sorted(times)[len(times) // 2]
            out["tflops"] = 4 * hq * d * sum(n * n for n in lens) / (out["ms"] * 1e-3) / 1e12
        out["status"] = "ok" if bad == 0 else "WRONG"
        if bad:
            out["error"] = f"{bad} elements outside atol=rtol={ATOL} or not finite"
    except Exception as exc:  # noqa: BLE001 - the result of this (config, shape)
        first = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:300]
        out["error"] = f"{locals().get('stage', 'setup')}: {first}"
    return out


def _run_child(args, config: int, shape: str) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--file", args.file, "--config", str(config),
           "--shape", shape, "--device", args.device]
    if args.wrap:
        cmd = args.wrap.split() + cmd
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"config": config, "shape": shape, "status": "timeout", "error": f"over {args.timeout} s",
                "wall_s": time.time() - t0}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    if lines:
        res = json.loads(lines[-1][len(MARK):])
    else:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        res = {"config": config, "shape": shape, "status": "crash",
               "error": f"rc {proc.returncode}: " + " | ".join(tail)}
    if args.wrap and proc.stdout:  # a sanitizer's report goes to stdout: keep its first findings
        report = [ln for ln in proc.stdout.splitlines() if ln.startswith("=========")][:8]
        if report:
            res["sanitizer"] = report
    res["wall_s"] = round(time.time() - t0, 1)
    return res


def _line(res: dict, labels: list[str]) -> str:
    label = labels[res["config"]] if res["config"] < len(labels) else str(res["config"])
    err = res.get("max_abs_err")
    perf = f" {res['ms']:.3f} ms {res['tflops']:.0f} TFLOP/s" if res.get("ms") else ""
    detail = f" max_abs_err={err:.4g}" if err is not None else ""
    msg = f" {res['error']}" if res.get("error") else ""
    return (f"[{res['config']}] {label:<18} {res['shape']:<15} {res['status']:<7}{detail}{perf}{msg} "
            f"({res.get('wall_s')} s)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", default=str(DEFAULT_FILE), help="the attention_forward file to diagnose")
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma list of {sorted(SHAPES)}")
    parser.add_argument("--configs", default="", help="comma list of config indices (default: all)")
    parser.add_argument("--jobs", type=int, default=min(12, os.cpu_count() or 4), help="children at a time")
    parser.add_argument("--timeout", type=float, default=50.0, help="seconds per child")
    parser.add_argument("--wrap", default="", help="prefix each child with this command (e.g. compute-sanitizer)")
    parser.add_argument("--json", default="", help="also write the results here")
    parser.add_argument("--device", default="cuda", help="cuda; cpu only to test this script (TRITON_INTERPRET=1)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--config", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--shape", default="small_gqa", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.file = str(Path(args.file).resolve())
    if args.child:
        print(MARK + json.dumps(_child(args)), flush=True)
        return 0

    shapes = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        parser.error(f"unknown shapes {unknown}; known: {sorted(SHAPES)}")
    configs = _load(args.file, "attn_diag_configs").attention_forward_kernel.configs  # imports torch, no CUDA
    labels = [_config_label(c) for c in configs]
    picked = [int(c) for c in args.configs.split(",") if c] or list(range(len(configs)))
    print(f"file {args.file}: {len(configs)} configs, shapes {shapes}", flush=True)
    t0 = time.time()
    jobs = [(c, s) for c in picked for s in shapes]
    results = []
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for res in pool.map(lambda job: _run_child(args, *job), jobs):
            results.append(res)
            print(_line(res, labels), flush=True)
            for ln in res.get("sanitizer", []):
                print("    " + ln, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"file": args.file, "labels": labels, "results": results}, indent=1))
    # the table: one row per config, one column per shape
    width = max(16, *(len(s) for s in shapes))
    print(f"\n{'config':<24}" + "".join(f"{s:>{width + 2}}" for s in shapes))
    by = {(r["config"], r["shape"]): r for r in results}
    for c in picked:
        cells = []
        for s in shapes:
            r = by[(c, s)]
            if r["status"] == "ok":
                cell = f"ok {r['max_abs_err']:.3f} " + (f"{r['tflops']:.0f}T" if r.get("tflops") else "-")
            else:
                cell = r["status"].upper()
            cells.append(f"{cell:>{width + 2}}")
        print(f"[{c}] {labels[c]:<20}" + "".join(cells))
    failed = sum(r["status"] != "ok" for r in results)
    print(f"\n{len(results) - failed}/{len(results)} ok in {time.time() - t0:.0f} s "
          f"(cell: status, max abs error vs SDPA fp32, TFLOP/s of one call)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
