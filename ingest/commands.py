"""`hotshape ingest`: the command-line face of the ingest package."""

from __future__ import annotations

import argparse
import atexit
import gc
import json
import os
import sys
from pathlib import Path

from ingest.cluster import add_cluster_argument
from ingest.discovery import discover
from ingest.limits import limits
from ingest.tracefile import is_url

# Imports inside functions: `hotshape` imports this module to build its parser (pipelines/cli.py), so each
# command loads only what it runs.

def _progress(items, total=None):
    total = len(items) if total is None else total
    if total > 1 and sys.stderr.isatty():
        from tqdm import tqdm

        return tqdm(items, total=total, unit="trace", file=sys.stderr)
    return items


def run_ingest(args: argparse.Namespace) -> int:
    """Ingest the traces named and write kernel_events, traces and op_shape_time under --out."""
    # The interpreter's exit runs full cyclic collections over every object still alive (polars'
    # and the store's modules): 0.1-0.3 s of a one-trace ingest. Frozen, they are only freed.
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)

    missing = [name for name in args.traces if not is_url(name) and not os.path.lexists(name)]
    if missing:  # before anything is read or created: a mistyped name makes no store
        print(f"hotshape ingest: {missing[0]}: no such file or directory", file=sys.stderr)
        return 2
    limits()  # a malformed bound in the environment is one line here, not one quarantine per trace
    paths = discover(args.traces)
    if not paths:
        print(f"hotshape ingest: no trace files found in {' '.join(args.traces)}", file=sys.stderr)
        return 2
    gc.disable()  # while the frame library's modules load: ~30k objects that live to the end of the process
    try:
        from ingest.output import write_ingest

        gc.freeze()  # so no collection walks them again (they cost 20 ms of collections in a one-trace ingest)
    finally:
        gc.enable()

    from ingest.tracefile import trace_name

    one = args.traces[0] if len(args.traces) == 1 else None
    # names in the store are relative to the one folder named (a URL's too: discover listed it as one)
    root = one if one is not None and (paths != [one] if is_url(one) else Path(one).is_dir()) else None
    captures = [trace_name(c) for c in args.capture] if args.capture else None
    summary = write_ingest(
        paths, args.out, root=root, progress=_progress, captures=captures, taxonomy=args.taxonomy, jobs=args.jobs,
        cluster=args.cluster,
    )
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for trace in summary["traces"]:
            share = trace["attributed_ns"] / trace["gpu_ns"] if trace["gpu_ns"] else 0.0
            print(
                f"{trace['trace_id']}  {trace['path']}  kernels={trace['kernels']}  "
                f"gpu={trace['gpu_ns'] / 1e6:.3f} ms  attributed={share:.1%}"
            )
        for bad in summary["quarantined"]:
            print(f"quarantined  {bad['path']}: {bad['reason']}", file=sys.stderr)
        print(f"{len(summary['traces'])} traces ingested, {len(summary['quarantined'])} quarantined -> {args.out}")
    if args.report:
        from ingest.report import report_dir

        print(report_dir(Path(args.out)))
    return 0 if summary["traces"] else 1


def register(subparsers) -> None:
    """Add `ingest` to the hotshape command."""
    p = subparsers.add_parser("ingest", help="profiler traces -> kernel_events, traces, op_shape_time")
    p.add_argument("traces", nargs="+", help="trace files or directories of them")
    p.add_argument("--out", required=True, help="trace store: a directory or fsspec URL (traces already in it are not parsed again)")
    p.add_argument("--json", action="store_true", help="print a machine-readable summary")
    p.add_argument("--report", action="store_true", help="print top operators, shapes and phases")
    # one value per flag: with nargs="+" `--capture C T --out D` took the trace T as a second capture
    p.add_argument("--capture", action="append", metavar="CAPTURE",
                   help="a graph-capture trace explaining CUDA/HIP-graph replays (repeat the flag for more)")
    p.add_argument("--taxonomy", help="a complete operator taxonomy YAML (every rule in one file) to use instead of the shipped one")
    p.add_argument("--jobs", type=int, default=None, help="traces ingested at once (default: every core once the input is over 20 MB)")
    add_cluster_argument(p)
    p.set_defaults(func=run_ingest)

