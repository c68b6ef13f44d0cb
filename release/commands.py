"""`hotshape build | refresh | verify | keygen | import-atrex | export-atrex`: the command-line face of release."""

from __future__ import annotations

import argparse
import json
import sys

from ingest.cluster import add_cluster_argument

# Imports inside functions: `hotshape` imports this module to build its parser (pipelines/cli.py), so each
# command loads only what it runs.


def _policy(path):
    if path is None:
        return None
    from weighting.selection import load_policy

    return load_policy(path)


def _report(args, summary: dict, text: str) -> int:
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        print(text)
    return 0


def _run(command: str, fn) -> int:
    # Bad input (layout, fleet, key, integrity, leak) is a clear one-line error, not a traceback.
    try:
        return fn()
    except (ValueError, FileNotFoundError) as exc:
        print(f"hotshape {command}: {exc}", file=sys.stderr)
        return 2


def run_build(args: argparse.Namespace) -> int:
    """Build a release from a trace root and fleet.yaml."""
    from release.build import build_release

    def go():
        s = build_release(args.traces, args.fleet, args.out, name=args.name, created=args.created,
                          policy=_policy(args.policy), signing_key=args.signing_key, wait_s=args.wait_s,
                          store=args.store, jobs=args.jobs, cluster=args.cluster)
        return _report(args, s, f"{s['release']}: {s['problems']} problems, {s['operators']} operators, "
                       f"coverage {s['coverage'].get('coverage_of_fleet', 0):.1%}, leak check passed")

    return _run("build", go)


def run_refresh(args: argparse.Namespace) -> int:
    """Add the next weights version to a release from the current traces."""
    from release.build import refresh_release

    def go():
        s = refresh_release(args.release, args.traces, args.fleet, created=args.created, policy=_policy(args.policy),
                            signing_key=args.signing_key, wait_s=args.wait_s, store=args.store, jobs=args.jobs,
                            cluster=args.cluster)
        return _report(args, s, f"{s['release']}: weights v{s['version']} ({s['dropped']} problems "
                       f"dropped to 0, {s['candidates']} candidates), total variation vs "
                       f"v{s['version'] - 1} {s['drift']['total_variation']:.4f}")

    return _run("refresh", go)


def _typed(check) -> None:
    """release.json's fields and types (release/info.py) where msgspec is installed; the integrity check
    alone runs on a machine without it (the GPU machine), as the evaluator's read does."""
    try:
        from release.info import parse_info
    except ImportError:
        return
    from release.integrity import RELEASE_JSON

    parse_info(check.info, check.root / RELEASE_JSON)


def run_verify(args: argparse.Namespace) -> int:
    """Check a release's digest, every file and its signature; 0 when it can be trusted, 2 otherwise."""
    from pathlib import Path

    from release.integrity import read_verified

    def go():
        pinned = Path(args.public_key).read_bytes() if args.public_key else None
        check = read_verified(args.release, pinned)
        _typed(check)
        if check.signature == "not checked":
            raise ValueError(f"{args.release}: cannot check its signature: the cryptography package is not installed")
        ok = check.signature == "verified" or args.allow_unsigned
        line = f"{args.release}: {'verified' if ok else 'not trusted'}: {check.summary()}"
        if args.json:
            print(json.dumps({"release": str(args.release), "ok": ok, "signature": check.signature, "key": check.key,
                              "pinned": check.pinned, "files": len(check.data), "digest": check.info["digest"],
                              "version_dir": str(check.root)}, sort_keys=True))
        else:
            print(line, file=sys.stdout if ok else sys.stderr)
        return 0 if ok else 2

    return _run("verify", go)


def run_keygen(args: argparse.Namespace) -> int:
    """Make a maintainer's Ed25519 key pair for signing releases."""
    from release.signing import keygen

    def go():
        s = keygen(args.out)
        return _report(args, s, f"{s['private_key']} (keep it private) and {s['public_key']} (publish it): "
                       f"{s['fingerprint']}")

    return _run("keygen", go)


def run_import(args: argparse.Namespace) -> int:
    """Import the Atrex-Bench data layout as a release."""
    from release.atrex import import_atrex

    def go():
        s = import_atrex(args.dir, args.out, name=args.name, created=args.created)
        return _report(args, s, f"{s['release']}: {s['problems']} problems, {s['operators']} "
                       f"operators, weights sum {s['weights_sum']:.12f}")

    return _run("import-atrex", go)


def run_export(args: argparse.Namespace) -> int:
    """Write a release in the Atrex-Bench data layout."""
    from release.atrex import export_atrex

    def go():
        s = export_atrex(args.release, args.out, weights_version=args.weights)
        return _report(args, s, f"{s['out']}: {s['problems']} problems, {s['operators']} operators")

    return _run("export-atrex", go)


def _store_arguments(p) -> None:
    p.add_argument("--store", help="trace store to read and extend (a directory or fsspec URL, e.g. the --out of "
                   "`hotshape ingest`; default: RELEASE.store beside the release)")
    p.add_argument("--jobs", type=int, help="traces parsed at once (default: every core once the input is over 20 MB)")
    add_cluster_argument(p)


def _version(text: str) -> int:
    return int(text.lstrip("v"))


def _writer_options(p) -> None:
    p.add_argument("--signing-key", help="Ed25519 private key file (hotshape keygen) to sign release.json with")
    p.add_argument("--wait-s", type=float, default=0.0,
                   help="wait this long for another build or refresh of the release to finish (default: stop at once)")


def register(subparsers) -> None:
    """Add build, refresh, verify, keygen, import-atrex and export-atrex to the hotshape command."""
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

    p = subparsers.add_parser("verify", help="check a release's digest, every file and its Ed25519 signature")
    p.add_argument("release", help="release directory")
    p.add_argument("--public-key", help="the maintainer's public key (PEM) the release must be signed by; "
                   "without it the key shipped in the release is used, which proves consistency only")
    p.add_argument("--allow-unsigned", action="store_true", help="exit 0 for a consistent unsigned release")
    p.add_argument("--json", action="store_true", help="print a machine-readable result")
    p.set_defaults(func=run_verify)

    p = subparsers.add_parser("keygen", help="make an Ed25519 key pair for signing releases")
    p.add_argument("--out", required=True, help="directory for release-signing.key (0600) and release-signing.pub")
    p.add_argument("--json", action="store_true", help="print a machine-readable summary")
    p.set_defaults(func=run_keygen)

    p = subparsers.add_parser("import-atrex", help="Atrex-Bench data layout -> a release")
    p.add_argument("dir", help="Atrex-Bench folder (holding data/ or operator_importance.json)")
    p.add_argument("--out", required=True, help="release directory to create")
    p.add_argument("--name", default="atrex-bench", help="release name")
    p.add_argument("--created", help="release date (default: none recorded)")
    p.add_argument("--json", action="store_true", help="print a machine-readable summary")
    p.set_defaults(func=run_import)

    p = subparsers.add_parser("export-atrex", help="a release -> the Atrex-Bench data layout")
    p.add_argument("release", help="release directory")
    p.add_argument("--out", required=True, help="folder to write data/ into")
    p.add_argument("--weights", type=_version, help="use W_op of this weights version as importance (e.g. v2)")
    p.add_argument("--json", action="store_true", help="print a machine-readable summary")
    p.set_defaults(func=run_export)
