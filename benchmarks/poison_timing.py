"""Why is the trusted replay a few percent faster than an independent loop on large memory-bound problems? (#38)

The replay (kernels_eval/harness/replay.py `time_program`) fills each call's output and scratch buffers with a
poison byte just before the call's L2 flush; an independent loop allocates its outputs fresh. This script times
the Triton reference's Model on a problem in interleaved rounds of four loops and prints the median kernel time of
each (the submission's kernels only, from the profiler's records):

  fresh     flush (zero_ of 256 MB), call: outputs allocated by the Model (the independent loop)
  poisoned  the previous call's outputs filled with 0xFF and freed (the allocator hands the same blocks back),
            flush, call: what the replay does
  fresh2    as `fresh` with two input sets in rotation instead of four
  tflush    as `poisoned`, but flushed by the evaluator's own Triton flush kernel (markers.py)

    python benchmarks/poison_timing.py [--rounds 5 --calls 20]

Needs torch, triton and a GPU only.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernels_eval.registry import load_reference  # noqa: E402

SUBMISSION = REPO / "examples" / "submissions" / "triton_reference"
PROBLEMS = (  # the largest problem of each operator whose replay time was 4-9% under the independent loop's
    ("moe_sum_reduce", {"routed_scaling_factor": 1.0}, {"hidden_size": 2048, "token_count": 11027, "top_k": 8}),
    ("per_token_group_quant_fp8", {"group_size": 128}, {"hidden_size": 2048, "token_count": 3087168}),
    ("fused_moe", {"intermediate_size": 768, "num_experts": 128, "top_k": 8},
     {"hidden_size": 2048, "intermediate_size": 768, "num_experts": 128, "token_count": 45936, "top_k": 8}),
)
SKIP = ("FillFunctor", "_hotshape_l2_flush", "Memset")


def outputs_of(got):
    import torch

    if isinstance(got, torch.Tensor):
        return [got]
    if isinstance(got, dict):
        got = list(got.values())
    return [t for t in got if isinstance(t, torch.Tensor)]


def loop(model, sets, calls: int, mode: str, flush, tflush) -> float:
    import torch
    from torch.profiler import ProfilerActivity, profile

    use = sets[:2] if mode == "fresh2" else sets
    prev: list = []
    with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        for k in range(calls):
            if mode in ("poisoned", "tflush"):
                for t in prev:
                    t.view(torch.uint8).fill_(0xFF) if t.is_contiguous() else t.fill_(0)
            prev = []
            if mode == "tflush":
                tflush.start()
            else:
                flush.zero_()
            prev = outputs_of(model(**use[k % len(use)]))
        flush.zero_()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type.name == "CUDA" and not any(s in e.name for s in SKIP)]
    total_us = sum(e.device_time for e in events)  # µs, every call's own kernels
    return total_us / calls


def main() -> int:
    import torch

    from kernels_eval.harness.markers import Markers
    from kernels_eval.harness.timing import L2_FLUSH_BYTES

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--ops", default="")
    args = ap.parse_args()
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    tflush = Markers(L2_FLUSH_BYTES)
    modes = ("fresh", "poisoned", "fresh2", "tflush")
    table = []
    for op, init, kwargs in PROBLEMS:
        if args.ops and op not in args.ops.split(","):
            continue
        spec = importlib.util.spec_from_file_location(f"sub_{op}", SUBMISSION / f"{op}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        model = module.Model(**init)
        if isinstance(model, torch.nn.Module):
            model = model.cuda()
        reference = load_reference(op)
        sets = []
        for seed in range(4):
            g = torch.Generator(device="cuda")
            g.manual_seed(1000 + seed)
            sets.append(reference.make_inputs(**kwargs, device="cuda", generator=g))
        for mode in modes:  # warm-up and autotuning outside the rounds
            loop(model, sets, 3, mode, flush, tflush)
        tuned = {name: str(getattr(a, "best_config", None)) for name, a in vars(module).items()
                 if type(a).__name__ == "Autotuner"}  # this process's own choice (no kept autotuning loaded)
        print(op, "autotuned here:", tuned or "-", flush=True)
        got = {m: [] for m in modes}
        for r in range(args.rounds):
            order = modes if r % 2 == 0 else tuple(reversed(modes))
            for mode in order:
                got[mode].append(loop(model, sets, args.calls, mode, flush, tflush))
        med = {m: statistics.median(v) for m, v in got.items()}
        table.append((op, med))
        print(op, {m: [round(x, 2) for x in v] for m, v in got.items()}, flush=True)
        del sets, model
        torch.cuda.empty_cache()
    print(f"\n{'problem':<28}" + "".join(f"{m:>10}" for m in modes) + "   poisoned/fresh")
    for op, med in table:
        print(f"{op:<28}" + "".join(f"{med[m]:>10.2f}" for m in modes) + f"   {med['poisoned'] / med['fresh']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
