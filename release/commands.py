"""`hotshape verify | keygen | import-atrex | export-atrex`: the command-line face of release (build and
refresh: flow/commands.py)."""

from __future__ import annotations

import argparse
import json
import sys

# Imports inside functions: `hotshape` imports this module to build its parser (pipelines/cli.py), so each
# command loads only what it runs.


def print_summary(args, summary: dict, text: str) -> int:
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        print(text)
    return 0


def one_line_errors(command: str, fn) -> int:
    # Bad input (layout, fleet, key, integrity, leak) is a clear one-line error, not a traceback.
    try:
        return fn()
    except (ValueError, FileNotFoundError) as exc:
        print(f"hotshape {command}: {exc}", file=sys.stderr)
        return 2


def _typed(check) -> None:
    """release.json's fields and types (release/info.py) where msgspec is installed; the integrity check
    alone runs on a machine without it (the GPU machine), as the evaluator's read does."""
    try:
        from release.info import parse_info
    except ImportError:
        return
    from release.integrity import RELEASE_JSON

    parse_info(check.info, check.root / RELEASE_JSON)


def verify_line(release, check, allow_unsigned: bool) -> str:
    """What `verify` says: SIGNED or UNSIGNED first, then what was checked, and for an unsigned release how to
    accept it (--allow-unsigned) or to have it signed."""
    files = f"digest and {len(check.data)} files verified"
    if check.signature == "verified":
        return f"{release}: SIGNED, verified: {check.summary()}"
    if allow_unsigned:
        return f"{release}: UNSIGNED, accepted (--allow-unsigned): {files}; no release.sig, nobody vouches for its maker"
    return (f"{release}: UNSIGNED, not trusted: {files}, but it has no release.sig; to accept an unsigned release: "
            f"hotshape verify {release} --allow-unsigned (a maintainer signs with --signing-key: "
            f"docs/release-integrity.md)")


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
        signed = check.signature == "verified"
        ok = signed or args.allow_unsigned
        line = verify_line(args.release, check, args.allow_unsigned)
        if args.json:
            print(json.dumps({"release": str(args.release), "ok": ok, "signed": signed, "signature": check.signature,
                              "key": check.key, "pinned": check.pinned, "files": len(check.data),
                              "digest": check.info["digest"], "version_dir": str(check.root)}, sort_keys=True))
        else:
            print(line, file=sys.stdout if ok else sys.stderr)
        return 0 if ok else 2

    return one_line_errors("verify", go)


def run_keygen(args: argparse.Namespace) -> int:
    """Make a maintainer's Ed25519 key pair for signing releases."""
    from release.signing import keygen

    def go():
        s = keygen(args.out)
        return print_summary(args, s, f"{s['private_key']} (keep it private) and {s['public_key']} (publish it): "
                             f"{s['fingerprint']}")

    return one_line_errors("keygen", go)


def run_import(args: argparse.Namespace) -> int:
    """Import the Atrex-Bench data layout as a release."""
    from release.atrex import import_atrex

    def go():
        s = import_atrex(args.dir, args.out, name=args.name, created=args.created)
        return print_summary(args, s, f"{s['release']}: {s['problems']} problems, {s['operators']} "
                             f"operators, weights sum {s['weights_sum']:.12f}")

    return one_line_errors("import-atrex", go)


def run_export(args: argparse.Namespace) -> int:
    """Write a release in the Atrex-Bench data layout."""
    from release.atrex import export_atrex

    def go():
        s = export_atrex(args.release, args.out, weights_version=args.weights)
        return print_summary(args, s, f"{s['out']}: {s['problems']} problems, {s['operators']} operators")

    return one_line_errors("export-atrex", go)


def _version(text: str) -> int:
    return int(text.lstrip("v"))


def register(subparsers) -> None:
    """Add verify, keygen, import-atrex and export-atrex to the hotshape command."""
    p = subparsers.add_parser("verify", help="check a release's digest, every file and its Ed25519 signature")
    p.add_argument("release", help="release directory")
    p.add_argument("--public-key", help="the maintainer's public key (PEM) the release must be signed by; "
                   "without it the key shipped in the release is used, which proves consistency only")
    p.add_argument("--allow-unsigned", action="store_true",
                   help="exit 0 for an unsigned release whose digest and files check (it still says UNSIGNED)")
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
