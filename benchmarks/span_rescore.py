"""S_op of the Triton reference under kernel-span timing, beside the CUDA-event figure of the same run and the
previous event-timed record, for every operator a progress file covers whole (issue 17, item 8).

    python benchmarks/span_rescore.py --release out/atrex-release \
        --progress benchmarks/results/kernel_span_H200/triton_reference_progress.jsonl \
        --previous benchmarks/results/triton_reference/catalogue_H200_progress.jsonl

S_i = min(1, t_roofline / t) for a done problem, else 0; S_op the median over the operator's problems; W_op the
operator's weight in the release's latest weights. Needs pyarrow only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernels_eval.harness.release_view import read_release_view  # noqa: E402


def _latest(path: Path) -> dict[str, dict]:
    """problem_id -> its last verdict in a progress file."""
    out = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            out[row["problem_id"]] = row
    return out


def s_op(rows: list[dict], roof: dict[str, float], key: str) -> float:
    """Median S_i of `rows` timed by column `key`."""
    return statistics.median(min(1.0, roof[r["problem_id"]] / r[key]) if r.get("stage") == "done" and r.get(key)
                             else 0.0 for r in rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", required=True)
    ap.add_argument("--progress", required=True, type=Path)
    ap.add_argument("--previous", required=True, type=Path)
    ap.add_argument("--hardware", default="H200")
    args = ap.parse_args()
    release = read_release_view(args.release)
    roof = release.roofline(args.hardware)
    weights_file = sorted((Path(args.release) / "public" / "weights").glob("v*.parquet"),
                          key=lambda p: int(p.stem[1:]))[-1]
    weight = {r["problem_id"]: r["weight"] for r in pq.read_table(weights_file).to_pylist()}
    by_op: dict[str, list[str]] = {}
    for p in release.problems:
        by_op.setdefault(p["operator"], []).append(p["problem_id"])
    new, old = _latest(args.progress), _latest(args.previous)
    print(f"{'operator':<30} {'n':>3} {'W_op':>7} {'S_op span':>10} {'S_op event':>11} {'S_op before':>12} "
          f"{'span/event':>10}")
    totals = {"W": 0.0, "span": 0.0, "event": 0.0, "before": 0.0}
    for op, ids in sorted(by_op.items()):
        if not all(i in new for i in ids):
            continue
        rows = [new[i] for i in ids]
        w = sum(weight.get(i, 0.0) for i in ids)
        span, event = s_op(rows, roof, "t_measured_s"), s_op(rows, roof, "t_event_s")
        before = s_op([old[i] for i in ids if i in old], roof, "t_measured_s") if any(i in old for i in ids) else None
        ratio = statistics.median(r["t_measured_s"] / r["t_event_s"] for r in rows if r.get("t_event_s"))
        totals["W"] += w
        totals["span"] += w * span
        totals["event"] += w * event
        totals["before"] += w * (before or 0.0)
        print(f"{op:<30} {len(ids):>3} {w:>7.4f} {span:>10.3f} {event:>11.3f} "
              f"{'-' if before is None else f'{before:.3f}':>12} {ratio:>10.2f}")
    w = totals["W"]
    if w:
        print(f"{'these operators (W-weighted)':<30} {'':>3} {w:>7.4f} {totals['span'] / w:>10.3f} "
              f"{totals['event'] / w:>11.3f} {totals['before'] / w:>12.3f}")
        print(f"contribution to S_agg: span {totals['span']:.4f}, event {totals['event']:.4f}, "
              f"before {totals['before']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
