"""`optimize --proposer search` on a GPU for operators the Triton reference scoreboard leaves short of their
ceiling. Default: paged_attention_decode (S_op 0.005 under kernel spans, 8 problems, ~27 s an evaluation; six
knobs: BLOCK_N, TARGET_PROGRAMS and MAX_SPLITS of its split-KV launch, warps, stages) and causal_conv1d (S_op
0.22, 9 problems, ~19 s; VEC, MAX_BLOCK, warps): latency-bound kernels with a split or tile space to search
(benchmarks/triton_scoreboard.py --timing span on the recorded runs; the first record, on layer_norm and
gated_rms_norm, found nothing to gain in their block sizes alone: results/optimize/README.md). Each operator
starts from its file in examples/submissions/triton_reference/, every candidate is judged by the sandboxed
evaluator on the release's problems of that operator, and the accepted file (if any) and the starting file
are judged once more at the end (confirm.json) so an accepted step is not a timing fluke.

Imports only torch, triton, numpy, pyarrow, pyyaml and kernels_eval (the GPU machine has no polars, DuckDB,
msgspec or dagster). Build the release here (`hotshape import-atrex examples/atrex-bench
--out REL`) and carry it.

    python benchmarks/optimize_gpu.py --release REL --out $OUT/optimize [--ops paged_attention_decode,causal_conv1d]
        [--budget 8] [--op-time-s 240] [--dropout-after 2] [--ncu]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernels_eval.agent import optimize as opt  # noqa: E402
from kernels_eval.agent.feedback import public_weights  # noqa: E402
from kernels_eval.agent.proposers.search import SearchProposer  # noqa: E402
from kernels_eval.harness.release_view import read_release_view  # noqa: E402
from kernels_eval.harness.runner import EvalConfig, detect_hardware  # noqa: E402
from kernels_eval.harness.sandbox import check_bwrap  # noqa: E402

STARTS = REPO / "examples" / "submissions" / "triton_reference"


def confirm(op: str, release, config, out: Path, summary: dict) -> dict:
    """The starting and the accepted file judged once more, side by side (weighted time, S_op)."""
    weights = public_weights(release.path)
    scratch = out / "confirm"
    scratch.mkdir(exist_ok=True)
    result = {}
    for name, path in (("start", STARTS / f"{op}.py"), ("accepted", out / f"{op}.py")):
        j = opt.judge(path.read_text(), op, release, config, weights, scratch)
        result[name] = {"weighted_time_s": j.weighted_time_s, "s_op": j.s_op, "all_good": j.all_good,
                        "eval_s": j.eval_s}
    s, a = result["start"]["weighted_time_s"], result["accepted"]["weighted_time_s"]
    result["speedup"] = (s / a) if (s and a) else None
    result["accepted_steps"] = summary["accepted"]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--ops", default="paged_attention_decode,causal_conv1d")
    parser.add_argument("--budget", type=int, default=8)
    parser.add_argument("--op-time-s", type=float, default=240.0, help="wall-clock seconds per operator")
    parser.add_argument("--dropout-after", type=int, default=2)
    parser.add_argument("--min-gain", type=float, default=0.02)
    parser.add_argument("--timing-budget-s", type=float, default=0.3)
    parser.add_argument("--ncu", action="store_true", help="profile accepted files with Nsight Compute")
    parser.add_argument("--no-sandbox", action="store_true")
    args = parser.parse_args()

    if not args.no_sandbox and check_bwrap() is not None:
        print(f"optimize_gpu: {check_bwrap()}", file=sys.stderr)
        return 2
    release = read_release_view(args.release)
    hardware = detect_hardware("cuda", release.hardware_names)
    config = EvalConfig(memory_cgroup=False, device="cuda", sandbox=not args.no_sandbox, hardware=hardware,
                        timing_budget_s=args.timing_budget_s)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"release": release.name, "hardware": hardware, "command": " ".join(sys.argv), "operators": {}}
    for op in [o.strip() for o in args.ops.split(",") if o.strip()]:
        began = time.monotonic()
        op_out = out / op
        summary = opt.optimize(op, release, STARTS / f"{op}.py", SearchProposer(), config, op_out,
                               budget=args.budget, dropout_after=args.dropout_after, min_gain=args.min_gain,
                               log=lambda text, op=op: print(f"[{op}] {text}", flush=True), ncu=args.ncu,
                               stop_at=began + args.op_time_s, stop_margin_evals=3.0)
        checked = confirm(op, release, config, op_out, summary) if summary["accepted"] else None
        report["operators"][op] = {"summary": summary, "confirm": checked, "wall_s": time.monotonic() - began}
        (out / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"[{op}] {json.dumps(report['operators'][op], default=str)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
