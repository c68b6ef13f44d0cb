"""`hotshape build | refresh`: a trace root and fleet.yaml into a release, or its next weights version."""

from __future__ import annotations

import argparse

from ingest.cluster import add_cluster_argument
from release.commands import one_line_errors, print_summary

# Imports inside functions: `hotshape` imports this module to build its parser (pipelines/cli.py), so each
# command loads only what it runs.


def _policy(path):
    if path is None:
        return None
    from weighting.selection import load_policy

    return load_policy(path)


def run_build(args: argparse.Namespace) -> int:
    """Build a release from a trace root and fleet.yaml."""
    from flow.build import build_release

    def go():
        s = build_release(args.traces, args.fleet, args.out, name=args.name, created=args.created,
                          policy=_policy(args.policy), signing_key=args.signing_key, wait_s=args.wait_s,
                          store=args.store, jobs=args.jobs, cluster=args.cluster)
        return print_summary(args, s, f"{s['release']}: {s['problems']} problems, {s['operators']} operators, "
                             f"coverage {s['coverage'].get('coverage_of_fleet', 0):.1%}, leak check passed")

    return one_line_errors("build", go)


def run_refresh(args: argparse.Namespace) -> int:
    """Add the next weights version to a release from the current traces."""
    from flow.build import refresh_release

    def go():
        s = refresh_release(args.release, args.traces, args.fleet, created=args.created, policy=_policy(args.policy),
                            signing_key=args.signing_key, wait_s=args.wait_s, store=args.store, jobs=args.jobs,
                            cluster=args.cluster)
        return print_summary(args, s, f"{s['release']}: weights v{s['version']} ({s['dropped']} problems "
                             f"dropped to 0, {s['candidates']} candidates), total variation vs "
                             f"v{s['version'] - 1} {s['drift']['total_variation']:.4f}")

    return one_line_errors("refresh", go)


def _writer_options(p) -> None:
    p.add_argument("--signing-key", help="Ed25519 private key file (hotshape keygen) to sign release.json with")
    p.add_argument("--wait-s", type=float, default=0.0,
                   help="wait this long for another build or refresh of the release to finish (default: stop at once)")


def _store_arguments(p) -> None:
    p.add_argument("--store", help="trace store to read and extend (a directory or fsspec URL, e.g. the --out of "
                   "`hotshape ingest`; default: RELEASE.store beside the release)")
    p.add_argument("--jobs", type=int, help="traces parsed at once (default: every core once the input is over 20 MB)")
    add_cluster_argument(p)


def register(subparsers) -> None:
    """Add build and refresh to the hotshape command."""
    p = subparsers.add_parser("build", help="traces + fleet.yaml -> a new release bundle")
    p.add_argument("--traces", required=True, help="trace root (fleet.yaml globs are relative to it)")
    p.add_argument("--fleet", required=True, help="fleet.yaml")
    p.add_argument("--out", required=True, help="release directory to create (must not exist)")
    p.add_argument("--name", help="release name (default: the --out directory's name)")
    p.add_argument("--created", help="release date (default: fleet window end; never the clock)")
    p.add_argument("--policy", help="selection policy YAML (default: weighting's policy.yaml)")
    p.add_argument("--json", action="store_true", help="print a machine-readable summary")
    _writer_options(p)
    _store_arguments(p)
    p.set_defaults(func=run_build)

    p = subparsers.add_parser("refresh", help="add weights vN+1 to a release from the current traces")
    p.add_argument("release", help="release directory")
    p.add_argument("--traces", required=True, help="trace root")
    p.add_argument("--fleet", required=True, help="fleet.yaml")
    p.add_argument("--created", help="date of the new weights version (default: fleet window end)")
    p.add_argument("--policy", help="selection policy YAML")
    p.add_argument("--json", action="store_true", help="print a machine-readable summary")
    _writer_options(p)
    _store_arguments(p)
    p.set_defaults(func=run_refresh)
