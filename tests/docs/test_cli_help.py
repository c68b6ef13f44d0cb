"""Every option and argument of every `hotshape` command says what it is in --help."""

from __future__ import annotations

import argparse

from pipelines.cli import build_parser


def _missing(parser: argparse.ArgumentParser, prefix: str) -> list[str]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _missing(sub, f"{prefix} {name}")
            continue
        if not (action.help or "").strip() or action.help == argparse.SUPPRESS:
            out.append(f"{prefix} {'/'.join(action.option_strings) or action.dest}")
    return out


def test_every_option_of_every_command_has_help_text():
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert {"ingest", "build", "verify", "eval", "score", "check", "feedback", "capture", "run-pipeline"} <= set(commands)
    missing = _missing(parser, "hotshape")
    assert not missing, "options without help text:\n" + "\n".join(missing)


def test_the_walk_sees_an_option_without_help():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers().add_parser("x")
    sub.add_argument("--quiet", action="store_true")
    assert _missing(parser, "p") == ["p x --quiet"]


def test_capture_has_json_and_says_in_one_line_why_it_cannot_run(tmp_path, capsys):
    """`capture --json` prints JSON (the default is a line a person reads); where it cannot run (no such model, no
    transformers, no CUDA GPU) it says so in one line, exit 2, before writing anything."""
    from kernels_eval.capture import summary_line
    from pipelines.cli import main

    out = tmp_path / "t.json.gz"
    assert main(["capture", "--model", "llama3-8c", "--out", str(out), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean llama3-8b" in err
    assert main(["capture", "--model", "llama3-8b", "--out", str(out), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hotshape capture: needs ") and not out.exists()
    info = {"trace": "t.json.gz", "model": "llama3-8b", "layers": 2, "batch": 8, "prompt_len": 512, "decode_steps": 8,
            "cuda_graph": True, "compile": False, "device_name": "NVIDIA H200"}
    assert summary_line(info) == ("t.json.gz: llama3-8b (2 layers), batch 8, prompt 512 tokens, 8 decode steps, "
                                  "CUDA graph on NVIDIA H200")


def test_every_command_says_what_it_does_and_the_top_level_says_where_to_start():
    """A new user's `hotshape eval --help` opened on the options with no word on what eval does (only drift had a
    description), and `hotshape --help` described the code's layout, not where to start."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert [name for name, sub in commands.items() if not (sub.description or "").strip()] == []
    assert commands["eval"].format_help().split("\n\n")[1].startswith("Evaluate a submission directory")
    # an option that takes a value says what it is when not given (eval --sets said nothing of its 3)
    unsaid = [f"{name} {a.option_strings[-1]}" for name, sub in commands.items() for a in sub._actions
              if a.option_strings and a.default not in (None, False, argparse.SUPPRESS) and "default" not in a.help]
    assert unsaid == [] and "fresh random input sets per problem (default: 3)" in " ".join(
        commands["eval"].format_help().split())
    top = parser.format_help()
    assert "hotshape run-pipeline" in top and "the main job on the bundled examples" in top and "sub-command" not in top
