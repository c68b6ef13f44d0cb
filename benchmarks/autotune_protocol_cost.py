"""What the evaluator's autotuning protocol (eval's default, docs/reproducibility.md) adds to a cold run of a
submission, estimated from the tuning keys its problems reach and recorded H200 step times (no GPU needed):

    PYTHONPATH=$PWD python benchmarks/autotune_protocol_cost.py \\
        --keys benchmarks/results/autotune_protocol/keys_triton_reference.json \\
        --progress benchmarks/results/triton_reference/catalogue_H200_progress.jsonl \\
        --steps benchmarks/results/replay_catalogue_H200/triton_reference_coldB_progress.jsonl

`--keys` (benchmarks/autotune_keys.py): per problem, each (kernel, key) reached and the configurations its pruning
keeps. `--progress`: a recorded run's call time per problem. `--steps`: a cold run through the trusted replay,
whose per-problem step seconds give, per operator (all operators' medians for one it lacks):

- W, one judged worker call (the worker's call less its tuning, the import, the reference and the compare, per
  call of the 3 a problem's checks make): each configuration's recording, and the discovery call;
- F, one replay request of a built program (the least replay overhead of the operator's problems: the replay
  step less its timed calls): each configuration's timing in each round;
- C, building a configuration the replay has not built (the median replay overhead less its lower quartile);
- the timed calls of one timing: 4 + clamp(0.02 s / call, 10, 50) calls of the call time plus 0.16 ms (the L2
  flush and the poisoning of the program's buffers).

Problems are taken in problem-id order within each operator, as the timing phase takes them: a (kernel, key)
decided by an earlier problem costs nothing more (its choice is kept and shared), a swept one costs
n x (W + C + F + timed calls) for its first round plus (F + timed calls) for each later-round timing, between none
(one configuration within 25% of the fastest after the first round) and 2n (all of them); a problem that swept
nothing records its call once with the kept choices (W); every problem makes one discovery call (W). The sum is
serial device time in the timing phase. A run that finds every problem's record adds nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

PER_CALL_OVERHEAD_S = 0.16e-3  # the L2 flush (256 MB at ~4.8 TB/s) and the buffers' poisoning, per timed call
HALF_A = ("block_scaled_mm,causal_conv1d,chunk_gated_delta_rule_state,fp8_blockscale_fused_moe,fp8_dynamic_per_token_"
          "quant,fused_qkv_rope,fused_rmsnorm_quant,gated_delta_rule_update,l2_norm,mla_decode_attention,moe_align_"
          "block_size,moe_sum_reduce,mrope,paged_attention_decode,unified_attention").split(",")


def step_costs(steps: list[dict]) -> tuple[dict[str, tuple[float, float, float]], tuple[float, float, float]]:
    """(W, F, C) per operator from a replay run's rows, and the medians over operators for the others."""
    by_op: dict[str, list[tuple[float, float]]] = {}
    for r in steps:
        s, t, n = r.get("step_s") or {}, r.get("t_measured_s"), r.get("n_timed")
        if t is None or not n:
            continue
        overhead = s.get("replay", 0.0) - n * (t + PER_CALL_OVERHEAD_S)
        call = (s.get("worker_call", 0.0) - s.get("in_worker_tune", 0.0) + s.get("import", 0.0)
                + s.get("reference", 0.0) + s.get("compare", 0.0)) / 3
        by_op.setdefault(r["operator"], []).append((max(overhead, 0.0), call))
    costs = {}
    for op, rows in by_op.items():
        over = sorted(o for o, _ in rows)
        costs[op] = (statistics.median(c for _, c in rows), over[0],
                     max(0.0, statistics.median(over) - over[(len(over) - 1) // 4]))
    fallback = tuple(statistics.median(c[i] for c in costs.values()) for i in range(3))
    return costs, fallback


def timed_calls_s(call_s: float) -> float:
    """Device seconds of one protocol timing (Budget: 0.02 s, 10-50 calls) of a call taking `call_s`."""
    per = call_s + PER_CALL_OVERHEAD_S
    return (4 + min(50, max(10, int(0.02 / per)))) * per


def estimate(keys: list[dict], call_s: dict[str, float], costs: dict, fallback: tuple, share: bool = True) -> dict:
    """operator -> {problems, swept, configs, low, high} seconds of sweeps in a cold run."""
    out: dict[str, dict] = {}
    decided: set = set()
    for row in sorted(keys, key=lambda r: (r["operator"], r["problem_id"])):
        tuned = [(k, key, n) for k, key, n, _ in row["tuned"] if n > 1]
        t = call_s.get(row["problem_id"])
        if not tuned or t is None:
            continue
        w, f, c = costs.get(row["operator"], fallback)
        o = out.setdefault(row["operator"], {"problems": 0, "swept": 0, "configs": 0, "low": 0.0, "high": 0.0})
        o["problems"] += 1
        timing = f + timed_calls_s(t)
        swept = [(k, key, n) for k, key, n in tuned if not share or (k, key) not in decided]
        decided |= {(k, key) for k, key, _ in tuned}
        first = sum(n * (w + c + timing) for _, _, n in swept)
        extra = w + (0.0 if swept else w)  # the discovery call; the final recording when nothing was swept
        o["swept"] += len(swept)
        o["configs"] += sum(n for *_, n in swept)
        o["low"] += first + extra
        o["high"] += first + extra + sum(2 * n * timing for *_, n in swept)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=Path, required=True)
    parser.add_argument("--progress", type=Path, required=True, help="a recorded run's progress file (JSON lines)")
    parser.add_argument("--steps", type=Path, required=True, help="a replay run's progress file (JSON lines)")
    args = parser.parse_args()
    keys = json.loads(args.keys.read_text())
    call_s = {}
    with args.progress.open() as lines:
        for row in map(json.loads, lines):
            if row.get("t_measured_s") is not None:
                call_s[row["problem_id"]] = row["t_measured_s"]
    with args.steps.open() as lines:
        costs, fallback = step_costs([json.loads(line) for line in lines])
    shared, alone = estimate(keys, call_s, costs, fallback), estimate(keys, call_s, costs, fallback, share=False)
    print("| operator | W s | F s | C s | problems | keys swept (per problem) | configurations | sweep s, one round "
          "| sweep s, three rounds |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for op, o in sorted(shared.items(), key=lambda kv: -kv[1]["high"]):
        w, f, c = costs.get(op, fallback)
        mark = "" if op in costs else " *"
        print(f"| {op}{mark} | {w:.3f} | {f:.3f} | {c:.3f} | {o['problems']} | {o['swept']} "
              f"({alone[op]['swept']}) | {o['configs']} | {o['low']:.0f} | {o['high']:.0f} |")
    w, f, c = fallback
    print(f"\n* no step times recorded for the operator: the operators' medians W {w:.3f} s, F {f:.3f} s, C {c:.3f} s")
    for name, est in (("keys shared", shared), ("every problem swept on its own", alone)):
        low, high = sum(o["low"] for o in est.values()), sum(o["high"] for o in est.values())
        halves = {h: [sum(o[b] for op, o in est.items() if (op in HALF_A) == (h == "A")) for b in ("low", "high")]
                  for h in "AB"}
        print(f"{name}: {sum(o['configs'] for o in est.values())} configurations swept, {low:.0f}-{high:.0f} s "
              f"({low / 60:.1f}-{high / 60:.1f} min) of serial device time in a cold run (half A "
              f"{halves['A'][0]:.0f}-{halves['A'][1]:.0f} s, half B {halves['B'][0]:.0f}-{halves['B'][1]:.0f} s)")
    print("a run that finds every problem's kept record: 0 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
