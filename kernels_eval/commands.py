"""`hotshape capture`, `eval` and `score`: the command-line face of kernels_eval."""

from __future__ import annotations

import argparse

# Imports inside functions: `hotshape` imports this module to build its parser (pipelines/cli.py), so each
# command loads only what it runs.


def run_capture(args: argparse.Namespace) -> int:
    """Profile a model architecture with random weights into a Kineto trace."""
    from kernels_eval.capture import capture_from_args

    return capture_from_args(args)


def register(subparsers) -> None:
    """Add the kernels_eval commands to the hotshape command."""
    from kernels_eval import eval_commands
    from kernels_eval.capture import add_capture_arguments
    from kernels_eval.library import commands as library_commands

    c = subparsers.add_parser("capture", help="profile a model on a GPU into a Kineto trace")
    add_capture_arguments(c)
    c.set_defaults(func=run_capture)
    eval_commands.register(subparsers)
    library_commands.register(subparsers)
