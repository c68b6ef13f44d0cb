"""`hotshape drift OLD NEW`: how weights moved between two releases or two weight versions."""

from __future__ import annotations

import argparse
import json
import sys

# Imports inside functions: `hotshape` imports this module to build its parser (pipelines/cli.py), so each
# command loads only what it runs.


def register(subparsers) -> None:
    """Add `hotshape drift` to the `hotshape` parser."""
    p = subparsers.add_parser(
        "drift",
        help="compare two weight sets (weights Parquet files or release directories)",
        description="Per-problem and per-operator weight deltas, Jensen–Shannon divergence, total "
        "variation, rank correlation, newly hot and newly cold problems. OLD/NEW are weights Parquet "
        "files (problem_id, operator, weight[, weight_<phase>]) or release directories (latest weights).",
    )
    p.add_argument("old", help="old weights: Parquet file or release directory")
    p.add_argument("new", help="new weights: Parquet file or release directory")
    p.add_argument("--json", action="store_true", help="print a machine-readable summary")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML report with plots")
    p.add_argument("--top", type=int, default=20, help="movers to list (default 20)")
    p.set_defaults(func=run_drift)


def run_drift(args: argparse.Namespace) -> int:
    """Compare, print, and optionally write the HTML report; 2 on unreadable input."""
    from release.weight_sets import read_context, read_weight_set
    from weighting.drift import causes, compare
    from weighting.drift_report import write_html

    try:
        old, old_label = read_weight_set(args.old)
        new, new_label = read_weight_set(args.new)
        report = compare(old, new)
        (old_labels, old_inputs), (new_labels, new_inputs) = read_context(args.old), read_context(args.new)
    except ValueError as exc:
        print(f"hotshape drift: {exc}", file=sys.stderr)
        return 2
    labels = old_labels | new_labels
    why = causes(report, old_inputs, new_inputs)
    summary = report.to_dict(top=args.top)
    summary.update(old=old_label, new=new_label)
    for row in summary["top_problem_movers"]:
        row.update({k: v for k, v in (("shape", labels.get(row["problem_id"])), ("cause", why.get(row["problem_id"])))
                    if v is not None})
    if args.html:
        summary["html"] = str(write_html(report, args.html, old_label, new_label, labels=labels, causes=why))
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return 0
    print(f"drift {old_label} → {new_label}")
    for key in ("js_divergence", "total_variation", "operator_total_variation", "spearman", "operator_spearman"):
        value = summary[key]
        print(f"  {key:26s} {'n/a' if value is None else f'{value:.4f}'}")
    print(f"  problems kept {summary['n_kept']}, newly hot {len(summary['newly_hot'])}, newly cold {len(summary['newly_cold'])}")
    print("  top movers:")
    for row in summary["top_problem_movers"][: min(args.top, 10)]:
        print(f"    {row['delta'] * 100:+7.2f} pt  {row.get('shape', row['problem_id'])}  [{row['status']}]")
        if "cause" in row:
            print(f"               cause: {row['cause']}")
    if args.html:
        print(f"  report: {summary['html']}")
    return 0
