"""Per autotuning configuration: the trusted replay's time beside the independent profiler loop's (issue 38).

replay_timing_agreement.py compares the replay with an independent loop that loads the autotuning the evaluator's
worker kept; on one H200 (2026-12-05) moe_sum_reduce's largest problem read 98.97 against 108.48 µs where the kept
configuration was BLOCK_M 2, BLOCK_N 2048, 8 warps, and 98.88 against 98.50 µs in a later run that kept BLOCK_M 1.
This takes the configuration out of the question: it evaluates the Triton reference's problems of --ops with the
evaluator's autotuning protocol (`--autotune protocol`: every configuration the autotuner's pruning keeps is
recorded pinned and timed by the replay, each one's figure kept in the protocol's record), then times each of those
configurations alone in this process with the independent loop of replay_timing_agreement.py (the autotuner given
that one configuration, so it benchmarks nothing), and prints both per configuration. Needs torch, triton, pyarrow
and pyyaml only:

    python benchmarks/config_agreement.py --release RELEASE --out OUT [--ops moe_sum_reduce] [--which largest]

Writes OUT/config_agreement.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from kernels_eval.harness.autotune_protocol import ProtocolError, parse_record  # noqa: E402
from kernels_eval.harness.release_view import read_release_view  # noqa: E402
from kernels_eval.harness.runner import EvalConfig, evaluate  # noqa: E402
from replay_timing_agreement import SUBMISSION, _pct, _us, chosen_problems, independent, log  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--release", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ops", default="moe_sum_reduce")
    ap.add_argument("--which", choices=("largest", "both"), default="largest",
                    help="the largest problem of each operator, or the largest and the smallest")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ops = [o for o in args.ops.split(",") if o]
    release = read_release_view(args.release)
    problems = {p["problem_id"]: p for p in release.problems}
    chosen = [pid for op in ops for pid in chosen_problems(release, [op])[:1 if args.which == "largest" else 2]]
    cache = Path(tempfile.mkdtemp(prefix="config-agreement-cache-"))
    store = Path(tempfile.mkdtemp(prefix="config-agreement-store-"))
    t0 = time.monotonic()
    config = EvalConfig(memory_cgroup=False, device="cuda", sandbox=False, triton_cache=cache, autotune="protocol",
                        autotune_store=store)
    rows = {r["problem_id"]: r for r in evaluate(SUBMISSION, release, config=config, ops=ops, problems=chosen)}
    log(f"[configs] evaluator with the protocol: {len(rows)} problems in {time.monotonic() - t0:.0f} s")
    table = []
    for path in sorted(p for p in store.rglob("*.json") if p.parent.name != "keys"):
        try:
            record = parse_record(path.read_text(), str(path))
        except ProtocolError as exc:
            log(f"  skipped {path.name}: {exc}")
            continue
        if record.problem_id not in rows:
            continue
        row = rows[record.problem_id]
        problem = problems[record.problem_id]
        for choice in record.kernels:
            for index, text in zip(choice.indices, choice.configs):
                entry = {"problem_id": record.problem_id, "operator": row["operator"], "kernel": choice.kernel,
                         "key": choice.key, "config_index": index, "config": text,
                         "chosen": index == choice.chosen, "replay_figure_s": choice.figure_s.get(index),
                         "replay_rounds_s": choice.rounds_s.get(index), "t_measured_s": row["t_measured_s"]}
                try:
                    entry["independent_s"], _ = independent(row["operator"], problem, cache,
                                                            only={choice.kernel: index})
                except Exception as exc:  # noqa: BLE001 - recorded; the other configurations go on
                    entry["error"] = f"{type(exc).__name__}: {exc}"[:300]
                if entry.get("independent_s") and entry["replay_figure_s"]:
                    entry["diff"] = (entry["replay_figure_s"] - entry["independent_s"]) / entry["independent_s"]
                table.append(entry)
                log(f"  {record.problem_id} {choice.kernel} [{index}] {text[:60]:<60} "
                    f"replay={_us(entry['replay_figure_s'])} independent={_us(entry.get('independent_s'))} "
                    f"diff={_pct(entry.get('diff'))}{' (chosen)' if entry['chosen'] else ''} "
                    f"{entry.get('error', '')}")
    for pid, row in rows.items():
        log(f"  {pid} {row['operator']} verdict {row['stage']}: t_measured {_us(row['t_measured_s'])}, "
            f"protocol's choice {row.get('autotune_config')}")
    (out / "config_agreement.json").write_text(json.dumps({"rows": table, "verdicts": list(rows.values())},
                                                          indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
