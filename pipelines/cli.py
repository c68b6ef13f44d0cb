"""The `hotshape` command: one sub-command per verb, each a thin call into a domain package."""

from __future__ import annotations

import argparse
import importlib
import sys

# Each module exposes `register(subparsers)`; sub-commands set `func(args) -> int`.
# Imported lazily per package so that `hotshape ingest` never pays for torch or dagster.
COMMAND_MODULES = (
    "ingest.commands",
    "weighting.commands",
    "release.commands",
    "kernels_eval.commands",
    "pipelines.commands",
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every sub-command that is installed."""
    parser = argparse.ArgumentParser(prog="hotshape", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one sub-command; its exit status."""
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
