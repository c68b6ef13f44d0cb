"""Our Triton GEMM and attention kernels against the vendor libraries on the same GPU, at large prefill shapes.

Target: bf16 GEMM and attention at their large prefill shapes at >= 70% of the measured cuBLAS /
flash-attention rate on the same machine.

Usage (on the GPU machine, from the repo root; stock python3 with torch, triton, pyarrow):
    python3 benchmarks/kernels_vs_libraries.py --out benchmarks/results/kernels_vs_libraries_H200.json
    python3 benchmarks/kernels_vs_libraries.py --ops attention_forward --attn-top 2 --out /tmp/kvl.json
    python3 benchmarks/kernels_vs_libraries.py --dry-run          # the shapes and FLOPs only; no GPU

Pairs (ours = the Triton reference submission, examples/submissions/triton_reference/<op>.py, called through
its Model as the evaluator calls it):
  gemm               out = a @ bᵀ, a [M, K], b [N, K] bf16, vs torch.matmul(a, b.T) (cuBLAS); M in
                     {4096, 8192, 16384}, (N, K) in {(4096, 4096), (14336, 4096), (4096, 14336)}: 6 pairs by
                     default (GEMM_SHAPES), any with --gemm-shapes.
  attention_forward  the largest catalogue shapes (out/atrex-release/public/manifest.parquet, by FLOPs),
                     bidirectional, vs F.scaled_dot_product_attention under sdpa_kernel(FLASH_ATTENTION) on
                     [B, H, L, D] views of the same packed tensors (one batch when every sequence has the same
                     length, else one call per sequence inside the timed region).
  unified_attention  the largest catalogue shapes by FLOPs (causal prefill over a paged cache), vs SDPA flash
                     causal on q/k/v gathered out of the paged cache into contiguous tensors beforehand (the
                     library gets the easier contiguous layout and no block-table walk; the gather is not timed).
                     GQA uses SDPA's enable_gqa when the flash backend accepts it, else K/V heads repeated.

Timing: the evaluator's loop (kernels_eval.harness.timing.time_calls: CUDA events, L2 flushed and a launch
shield queued before each call, settling), after a first untimed call (ours autotunes there), median of at
least --reps (>= 20) calls. TFLOP/s use the work models'
flops() (catalogue/operators/<op>/__init__.py), the same count for both sides; ratio = library time / our time (= our
rate / library rate). Each operator runs in its own child process so a crash (an illegal memory access
poisons the CUDA context) loses only that operator. Writes --out (JSON) and prints a table last; about
100 s on an H200 (most of it the autotuners' first calls).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

SUBMISSION = REPO / "examples" / "submissions" / "triton_reference"
MANIFEST = REPO / "out" / "atrex-release" / "public" / "manifest.parquet"
OPS = ("gemm", "attention_forward", "unified_attention")
TARGET = 0.70
MARK = "KVL_RESULT "
# M x N x K: every M of {4096, 8192, 16384} and every (N, K) of {(4096, 4096), (14336, 4096), (4096, 14336)}
# (Llama-8B-like projections), 6 of the 9 pairs so the whole script stays near 100 s (each shape autotunes 15 configs)
GEMM_SHAPES = ((4096, 4096, 4096), (8192, 4096, 4096), (16384, 4096, 4096), (8192, 14336, 4096),
               (8192, 4096, 14336), (16384, 14336, 4096))


# ---- shapes (no torch, no GPU) ---------------------------------------------------------------------------

def flops(op: str, kwargs: dict) -> int:
    from catalogue.operators import load_work

    return int(load_work(op).flops(**kwargs))


def gemm_shapes(spec: str = "") -> list[dict]:
    """[{"init": ..., "inputs": ...}] for the GEMM sizes (MxNxK comma list, or the default grid)."""
    sizes = [tuple(int(x) for x in s.split("x")) for s in spec.split(",") if s] if spec else list(GEMM_SHAPES)
    return [{"problem_id": f"gemm_{m}x{n}x{k}", "init": {"scaling": "none"},
             "inputs": {"m": m, "n": n, "k": k, "dtype": "bf16", "scaling": "none"}} for m, n, k in sizes]


def catalogue_shapes(op: str, top: int, manifest: Path = MANIFEST) -> list[dict]:
    """The `top` problems of `op` in the release manifest with the most FLOPs (ties: first listed)."""
    import pyarrow.parquet as pq

    rows = [r for r in pq.read_table(manifest, columns=["problem_id", "operator", "init_kwargs", "input_kwargs"])
            .to_pylist() if r["operator"] == op]
    shapes = [{"problem_id": r["problem_id"], "init": json.loads(r["init_kwargs"] or "{}"),
               "inputs": json.loads(r["input_kwargs"])} for r in rows]
    if op == "unified_attention":  # prefill: every query row of its sequence (the reference's default)
        shapes = [s for s in shapes if s["inputs"].get("query_lens") in (None, s["inputs"]["seq_lens"])]
    shapes.sort(key=lambda s: -flops(op, {**s["init"], **s["inputs"]}))
    return shapes[:top]


def describe(op: str, inputs: dict) -> str:
    """A short human label of a shape."""
    if op == "gemm":
        return f"M{inputs['m']} N{inputs['n']} K{inputs['k']}"
    lens = inputs["seq_lens"]
    seqs = f"{lens[0]}" if len(lens) == 1 else (f"{len(lens)}x{lens[0]}" if len(set(lens)) == 1
                                                 else f"{len(lens)} seqs sum {sum(lens)}")
    if op == "attention_forward":
        return f"L{seqs} H{inputs['num_heads']} D{inputs['head_dim']}"
    return f"L{seqs} Hq{inputs['num_query_heads']}/{inputs['num_kv_heads']} D{inputs['head_size']}"


def plan(args) -> dict[str, list[dict]]:
    out = {}
    for op in args.ops:
        if op == "gemm":
            out[op] = gemm_shapes(args.gemm_shapes)
        else:
            out[op] = catalogue_shapes(op, args.attn_top if op == "attention_forward" else args.ua_top,
                                       Path(args.manifest))
    return out


# ---- the child: one operator on the GPU --------------------------------------------------------------------

def _load_submission(op: str, folder: str):
    spec = importlib.util.spec_from_file_location(f"kvl_{op}", Path(folder) / f"{op}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed_median(fn, reps: int, warmup: int) -> float:
    """Median seconds per call of fn() under the evaluator's own timing loop (kernels_eval.harness.timing), so
    both sides are timed exactly as the scoreboard's problems are; at least `reps` (>= 20) calls."""
    from kernels_eval.harness.timing import quantiles, time_calls

    return quantiles(time_calls(lambda: fn(), [{}], warmup=max(1, warmup), min_calls=max(20, reps)))["median"]


def _sdpa_flash(q, k, v, causal: bool):
    """(call, how): a zero-argument SDPA call with only the flash backend allowed. GQA goes through enable_gqa
    when the flash backend takes it (tried once here); else K/V heads are repeated here, outside the call."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    group = q.shape[1] // k.shape[1]

    def flash(kk, vv, **kw):
        def call():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, kk, vv, is_causal=causal, **kw)
        return call

    if group == 1:
        return flash(k, v), "flash"
    try:
        call = flash(k, v, enable_gqa=True)
        call()
        return call, "flash (enable_gqa)"
    except (RuntimeError, TypeError):
        return flash(k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)), \
            "flash (K/V heads repeated beforehand)"


def _library_attention(op: str, given: dict, inputs: dict):
    """(call, label, to_packed): the SDPA flash call on [B, H, L, D] views of the packed tensors, how it runs
    and is batched, and a map of its output to our packed [sum L, H, D] layout."""
    import torch

    lens = list(inputs["seq_lens"])
    q = given["q"]
    hq, d = q.shape[1], q.shape[2]
    if op == "attention_forward":
        k_packed, v_packed = given["k"], given["v"]
        causal = False
    else:  # gather the paged cache into contiguous [sum L, Hkv, D] (untimed)
        kc, vc, table = given["k_cache"], given["v_cache"], given["block_table"]
        bs, hkv = kc.shape[1], kc.shape[2]
        ks, vs = [], []
        for s, n in enumerate(lens):
            blocks = table[s, :-(-n // bs)].long()
            ks.append(kc[blocks].reshape(-1, hkv, d)[:n])
            vs.append(vc[blocks].reshape(-1, hkv, d)[:n])
        k_packed, v_packed = torch.cat(ks).contiguous(), torch.cat(vs).contiguous()
        causal = True
    hkv = k_packed.shape[1]
    if len(set(lens)) == 1:  # one batched call: [B, L, H, D] memory seen as [B, H, L, D]
        b, n = len(lens), lens[0]
        call, how = _sdpa_flash(q.view(b, n, hq, d).transpose(1, 2), k_packed.view(b, n, hkv, d).transpose(1, 2),
                                v_packed.view(b, n, hkv, d).transpose(1, 2), causal)

        def to_packed(out):
            return out.transpose(1, 2).reshape(-1, hq, d)
        return call, f"{how}, one batch of {b}", to_packed
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    calls = []
    for a, b in zip(cu, cu[1:]):
        if b > a:
            one, how = _sdpa_flash(q[a:b].unsqueeze(0).transpose(1, 2), k_packed[a:b].unsqueeze(0).transpose(1, 2),
                                   v_packed[a:b].unsqueeze(0).transpose(1, 2), causal)
            calls.append(one)

    def call_all():
        return [one() for one in calls]

    def to_packed_all(outs):
        return torch.cat([o[0].transpose(0, 1) for o in outs])
    return call_all, f"{how}, {len(calls)} calls", to_packed_all


def _run_op(op: str, shapes: list[dict], args) -> list[dict]:
    import torch

    from kernels_eval import registry

    module = _load_submission(op, args.submission)
    reference = registry.load_reference(op)
    results = []
    for shape in shapes:
        kw = {**shape["init"], **shape["inputs"]}
        short = {k: v for k, v in shape["inputs"].items() if k != "seq_lens" or len(v) <= 8}
        if len(shape["inputs"].get("seq_lens", ())) > 8:
            short["seq_lens"] = f"{len(shape['inputs']['seq_lens'])} sequences, sum {sum(shape['inputs']['seq_lens'])}"
        res = {"op": op, "problem_id": shape["problem_id"], "shape": describe(op, shape["inputs"]),
               "input_kwargs": short, "flops": flops(op, kw), "status": "error", "error": ""}
        t0 = time.time()
        try:
            g = torch.Generator(device="cuda").manual_seed(0)
            given = reference.make_inputs(**shape["inputs"], device="cuda", generator=g)
            model = module.Model(**shape["init"])
            with torch.no_grad():
                ours_fn = lambda: model(**given)  # noqa: E731
                if op == "gemm":
                    a, b = given["a"], given["b"]
                    lib_fn = lambda: torch.matmul(a, b.T)  # noqa: E731
                    to_packed = lambda out: out  # noqa: E731
                    res["library"] = "torch.matmul (cuBLAS)"
                else:
                    lib_fn, label, to_packed = _library_attention(op, given, shape["inputs"])
                    res["library"] = f"SDPA {label}"
                    if op == "unified_attention":
                        res["library"] += ", on K/V gathered contiguous from the cache (untimed)"
                ours = ours_fn()  # autotunes
                lib = lib_fn()
                torch.cuda.synchronize()
                res["max_abs_diff"] = float((ours.float() - to_packed(lib).float()).abs().max())
                del ours, lib
                res["ours_s"] = timed_median(ours_fn, args.reps, args.warmup)
                res["library_s"] = timed_median(lib_fn, args.reps, args.warmup)
            res["ours_tflops"] = res["flops"] / res["ours_s"] / 1e12
            res["library_tflops"] = res["flops"] / res["library_s"] / 1e12
            res["ratio"] = res["library_s"] / res["ours_s"]
            res["meets_target"] = res["ratio"] >= TARGET
            res["status"] = "ok"
        except Exception as exc:  # noqa: BLE001 - recorded; the next shape may still run
            res["error"] = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:400]
        res["wall_s"] = round(time.time() - t0, 1)
        results.append(res)
        print(MARK + json.dumps(res), flush=True)
        torch.cuda.empty_cache()
    return results


def _child(args) -> None:
    shapes = json.loads(Path(args.child_shapes).read_text())
    _run_op(args.child, shapes, args)


# ---- the parent ---------------------------------------------------------------------------------------------

def _line(r: dict) -> str:
    if r["status"] != "ok":
        return f"{r['op']:<18} {r['shape']:<34} {r['status'].upper()}: {r.get('error', '')}"
    flag = "yes" if r["meets_target"] else "NO"
    return (f"{r['op']:<18} {r['shape']:<34} {r['ours_s'] * 1e3:9.3f} {r['ours_tflops']:7.1f} "
            f"{r['library_s'] * 1e3:9.3f} {r['library_tflops']:7.1f} {r['ratio']:6.2f} {flag:>4}  "
            f"{r['max_abs_diff']:.3g}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "kernels_vs_libraries.json"))
    parser.add_argument("--ops", default=",".join(OPS), help=f"comma list of {OPS}")
    parser.add_argument("--manifest", default=str(MANIFEST))
    parser.add_argument("--submission", default=str(SUBMISSION), help="folder with gemm.py and the attention files")
    parser.add_argument("--gemm-shapes", default="", help="MxNxK comma list (default: GEMM_SHAPES, e.g. "
                                                           "4096x4096x4096,16384x14336x4096)")
    parser.add_argument("--attn-top", type=int, default=3, help="largest attention_forward shapes to run")
    parser.add_argument("--ua-top", type=int, default=3, help="largest unified_attention shapes to run")
    parser.add_argument("--reps", type=int, default=20, help="timed calls per side (at least 20)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=150.0, help="seconds per operator child")
    parser.add_argument("--dry-run", action="store_true", help="print the plan (shapes, FLOPs) and exit; no GPU")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--child-shapes", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.ops = [o for o in args.ops.split(",") if o]
    bad = [o for o in args.ops if o not in OPS]
    if bad:
        parser.error(f"unknown ops {bad}; known: {OPS}")
    args.submission = str(Path(args.submission).resolve())
    if args.child:
        _child(args)
        return 0

    if any(op != "gemm" for op in args.ops) and not Path(args.manifest).is_file():
        parser.error(f"no manifest at {args.manifest}: out/ is git-ignored, so carry out/atrex-release/public to "
                     "the GPU machine or pass --manifest")
    todo = plan(args)
    if args.dry_run:
        for op, shapes in todo.items():
            for s in shapes:
                print(f"{op:<18} {s['problem_id']:<20} {describe(op, s['inputs']):<34} "
                      f"{flops(op, {**s['init'], **s['inputs']}) / 1e12:8.2f} TFLOP")
        return 0

    import tempfile

    t0 = time.time()
    results, versions = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for op, shapes in todo.items():
            path = Path(tmp) / f"{op}.json"
            path.write_text(json.dumps(shapes))
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", op, "--child-shapes", str(path),
                   "--submission", args.submission, "--reps", str(args.reps), "--warmup", str(args.warmup)]
            print(f"-- {op}: {len(shapes)} shapes", flush=True)
            t_op = time.time()
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, cwd=REPO)
                stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
            except subprocess.TimeoutExpired as exc:
                stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
                stderr, rc = f"timed out after {args.timeout} s", None
            got = [json.loads(ln[len(MARK):]) for ln in stdout.splitlines() if ln.startswith(MARK)]
            for r in got:
                print("   " + _line(r), flush=True)
            done = {r["problem_id"] for r in got}
            for s in shapes:  # shapes the child never reported (it crashed or timed out)
                if s["problem_id"] not in done:
                    tail = " | ".join(stderr.strip().splitlines()[-2:])
                    got.append({"op": op, "problem_id": s["problem_id"], "shape": describe(op, s["inputs"]),
                                "status": "crash", "error": f"child rc {rc}: {tail}"[:400]})
                    print("   " + _line(got[-1]), flush=True)
            print(f"   ({op}: {time.time() - t_op:.0f} s)", flush=True)
            results += got
    try:
        import torch
        import triton

        versions = {"torch": torch.__version__, "triton": triton.__version__,
                    "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    except Exception as exc:  # noqa: BLE001 - informational
        versions = {"error": str(exc)}
    summary = {}
    for op in todo:
        ratios = [r["ratio"] for r in results if r["op"] == op and r["status"] == "ok"]
        summary[op] = {"shapes": len(todo[op]), "ok": len(ratios),
                       "min_ratio": min(ratios) if ratios else None,
                       "geomean_ratio": statistics.geometric_mean(ratios) if ratios else None,
                       "all_meet_target": bool(ratios) and len(ratios) == len(todo[op]) and min(ratios) >= TARGET}
    out = {"target": f"ours >= {TARGET:.0%} of the library rate", "target_ratio": TARGET, **versions,
           "note": "ratio = library time / our time; unified_attention's library gets K/V gathered contiguous "
                   "(untimed), ours walks the paged cache", "summary": summary, "results": results,
           "wall_s": round(time.time() - t0, 1)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))

    print(f"\n{versions.get('device')}  torch {versions.get('torch')}  triton {versions.get('triton')}  "
          f"(target: ours >= {TARGET:.0%} of the library; unified_attention's library reads contiguous K/V)")
    print(f"{'op':<18} {'shape':<34} {'ours ms':>9} {'TF/s':>7} {'lib ms':>9} {'TF/s':>7} {'ratio':>6} {'>=70%':>4}"
          f"  max|diff|")
    for r in results:
        print(_line(r))
    for op, s in summary.items():
        gm = f"{s['geomean_ratio']:.2f}" if s["geomean_ratio"] else "-"
        mn = f"{s['min_ratio']:.2f}" if s["min_ratio"] else "-"
        print(f"{op:<18} {s['ok']}/{s['shapes']} ok, ratio min {mn} geomean {gm}, "
              f"target {'met' if s['all_meet_target'] else 'NOT met'}")
    print(f"wrote {args.out} in {time.time() - t0:.0f} s")
    return 0 if all(s["all_meet_target"] for s in summary.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
