"""The `hotshape` command: one sub-command per verb, each a thin call into a domain package."""

from __future__ import annotations

import argparse
import importlib
import sys

# Each module exposes `register(subparsers)`; sub-commands set `func(args) -> int`.
# Imported lazily per package so that `hotshape ingest` never pays for torch or dagster.
COMMAND_MODULES = (
    "ingest.commands",
    "release.commands",
    "release.drift_commands",
    "flow.commands",
    "kernels_eval.commands",
    "kernels_eval.agent.commands",
    "pipelines.commands",
)


# Exit statuses every sub-command shares: 1 when the work ran and failed, 2 when the input was wrong.
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


DESCRIPTION = ("Mine GPU profiler traces into a weighted kernel benchmark (a release), and evaluate and score\n"
               "candidate Triton kernels against it.")
EPILOG = """start here:
  hotshape run-pipeline          the main job on the bundled examples (traces -> release -> scores)
  hotshape check FILE --op OP    compile and check one kernel file on its operator's smoke shapes
  hotshape COMMAND --help        what one command does and its options"""


def package_version() -> str:
    """The installed hotshape distribution's version (from its metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hotshape")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


class _VersionAction(argparse.Action):
    """--version, its package metadata read only when asked for (importlib.metadata costs every command ~40 ms)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show the version and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"hotshape {package_version()}")
        parser.exit()


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser with every sub-command that is installed; given the command line `argv`, only
    the command modules up to the one registering the sub-command it names are imported."""
    parser = argparse.ArgumentParser(prog="hotshape", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_VersionAction)
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = next((a for a in argv if not a.startswith("-")), None) if argv is not None else None
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(subparsers)
        if wanted in subparsers.choices:
            break
    for choice in subparsers._choices_actions:  # `hotshape X --help` opens with what X does, as the list says
        command = subparsers.choices[choice.dest]
        if not command.description:
            command.description = choice.help[:1].upper() + choice.help[1:] + "."
        for action in command._actions:  # and each option with a value says what it is when not given
            if (action.option_strings and action.default not in (None, False, argparse.SUPPRESS)
                    and "default" not in (action.help or "")):
                action.help = f"{action.help} (default: %(default)s)"
    return parser


# Optional packages -> the extra that installs them (pyproject.toml [project.optional-dependencies]).
EXTRAS = {"dagster": "dagster", "dagster_webserver": "dagster", "dagster_postgres": "dagster", "dagster_dg_cli": "dagster",
          "dask": "dask", "distributed": "dask", "torch": "kernels", "triton": "kernels", "safetensors": "kernels"}


def error_line(exc: BaseException) -> tuple[str, int]:
    """One line saying what went wrong (naming the file where the error knows it) and the exit status."""
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] in EXTRAS:
        extra = EXTRAS[exc.name.split(".")[0]]
        return (f"needs {exc.name.split('.')[0]}, which the core install leaves out: pip install 'hotshape[{extra}]'",
                EXIT_BAD_INPUT)
    if isinstance(exc, FileNotFoundError) and exc.strerror is None and len(exc.args) == 1:
        return f"{exc.args[0]}: no such file or directory", EXIT_BAD_INPUT  # pyarrow raises it with the path alone
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        bad_input = isinstance(exc, (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError))
        return f"{exc.filename}: {exc.strerror}", EXIT_BAD_INPUT if bad_input else EXIT_FAILED
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, (ValueError, LookupError, FileNotFoundError, NotADirectoryError, IsADirectoryError)):
        return text, EXIT_BAD_INPUT
    if isinstance(exc, OSError):
        return text, EXIT_FAILED
    return f"internal error {type(exc).__name__}: {text} (rerun with --debug for the traceback)", EXIT_FAILED


def main(argv: list[str] | None = None) -> int:
    """Run one sub-command; its exit status (an error is one line on stderr; --debug shows the traceback)."""
    args = build_parser(sys.argv[1:] if argv is None else argv).parse_args(argv)
    try:
        status = int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"hotshape {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the convention: one line, the traceback only on request
        if args.debug:
            raise
        line, status = error_line(exc)
        print(f"hotshape {args.command}: {line}", file=sys.stderr)
        return status
    return status


if __name__ == "__main__":
    sys.exit(main())
