"""How two evaluator runs of the same problems agree, per problem: the kernel span that scores and the CUDA-event
figure kept beside it. Reads the runs' progress files (one verdict per line, as benchmarks/eval_gpu.sh writes them):

    python3 benchmarks/repeat_timings.py A_progress.jsonl B_progress.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

FIGURES = {"kernel span": "t_measured_s", "CUDA events": "t_event_s"}
BANDS = (0.02, 0.05, 0.10)


def verdicts(path: Path) -> dict[str, dict]:
    """Each problem's last verdict in a progress file."""
    with path.open() as lines:
        return {row["problem_id"]: row for row in map(json.loads, lines)}


def agreement(first: dict[str, dict], second: dict[str, dict], key: str) -> dict | None:
    """|second / first - 1| over the problems both runs timed: median, counts within each band, the largest."""
    deviations = sorted(
        (abs(second[p][key] / first[p][key] - 1), p, first[p]["operator"], first[p][key], second[p][key])
        for p in first.keys() & second.keys() if first[p].get(key) and second[p].get(key)
    )
    if not deviations:
        return None
    return {"problems": len(deviations), "median": statistics.median(d[0] for d in deviations),
            "within": [sum(d[0] <= band for d in deviations) for band in BANDS], "largest": deviations[-1]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    args = parser.parse_args()
    first, second = verdicts(args.first), verdicts(args.second)
    bands = " | ".join(f"within {band:.0%}" for band in BANDS)
    print(f"| figure | median deviation | {bands} | largest |")
    print("|---|---:|" + "---:|" * len(BANDS) + "---|")
    for figure, key in FIGURES.items():
        found = agreement(first, second, key)
        if found is None:
            print(f"| {figure} | - |" + " - |" * len(BANDS) + " - |")
            continue
        n = found["problems"]
        deviation, _, operator, a, b = found["largest"]
        counts = " | ".join(f"{k}/{n}" for k in found["within"])
        print(f"| {figure} | {found['median']:.2%} | {counts} | {deviation:.1%} ({operator}, {a * 1e6:.1f} vs {b * 1e6:.1f} µs) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
