"""`hotshape workspace`, `check`, `feedback` and `optimize`: the agent side's commands."""

from __future__ import annotations

import argparse
import json
import sys

# Imports inside functions: `hotshape` imports this module to build its parser (pipelines/cli.py), so each
# command loads only what it runs.


def _csv(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def _device(name: str | None) -> str:
    if name:
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def need_kernels() -> None:
    """Import torch and Triton, which the commands that run candidates need (the `kernels` extra): without them
    the command stops at once with one line saying which extra installs them (pipelines.cli.error_line)."""
    import torch  # noqa: F401
    import triton  # noqa: F401


def _sandbox_problem(no_sandbox: bool) -> str | None:
    """Why candidates cannot be run here (no bubblewrap, or no cgroup for their memory limit), or None."""
    from kernels_eval.harness.limits import CgroupRequired, memory_accounting

    try:
        memory_accounting(require_cgroup=True)
    except CgroupRequired as exc:
        return str(exc)
    if no_sandbox:
        return None
    from kernels_eval.harness.sandbox import check_bwrap

    return check_bwrap()


def _shape(problem: dict) -> str:
    """A problem's kwargs (init and input) as one line: what its id stands for."""
    kwargs = {**json.loads(problem.get("init_kwargs") or "{}"), **json.loads(problem.get("input_kwargs") or "{}")}
    return " ".join(f"{k}={v}" for k, v in sorted(kwargs.items()))


def run_workspace(args: argparse.Namespace) -> int:
    """Write an agent workspace of RELEASE's operators; refuse (exit 1) if any file would carry a sealed string."""
    from kernels_eval.agent.workspace import WorkspaceLeak, build_workspace
    from kernels_eval.selection import SelectionError, unknown_names
    from release.bundle import ReleaseError, read_release

    try:
        if args.ops:
            rel = read_release(args.release)
            errors = unknown_names(_csv(args.ops), rel.manifest["operator"].unique().to_list(), "operator",
                                   f"release {rel.name}")
            if errors:
                raise SelectionError("; ".join(errors))
        summary = build_workspace(args.release, args.out, _csv(args.ops), layout=args.layout,
                                  weights_version=args.weights)
    except WorkspaceLeak as exc:
        print(f"hotshape workspace: refused, {exc}", file=sys.stderr)
        return 1
    except (ReleaseError, FileExistsError, ValueError) as exc:
        print(f"hotshape workspace: {exc}", file=sys.stderr)
        return 2
    except KeyError as exc:
        print(f"hotshape workspace: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(summary))
    else:
        leak = summary["leak_check"]
        print(f"{summary['out']}: {len(summary['operators'])} operators, {summary['problems']} problems "
              f"({summary['layout']} layout); leak check: {leak['files_checked']} files, "
              f"{leak['sealed_strings']} sealed strings, none found")
    return 0


def run_check(args: argparse.Namespace) -> int:
    """Compile and correctness of FILE as operator OP on its smoke shapes; 0 when it passes, 1 when not."""
    from kernels_eval.harness.sanitize import terminal  # candidate text, made inert for the terminal

    need_kernels()
    from catalogue.registry import operator_names
    from kernels_eval.agent.check import check_file, passed
    from kernels_eval.selection import SelectionError, known_operator

    try:
        known_operator(args.op, operator_names(), "the operator registry")
    except SelectionError as exc:
        print(f"hotshape check: {exc}", file=sys.stderr)
        return 2
    problem = _sandbox_problem(args.no_sandbox)
    if problem is not None:
        print(f"hotshape check: {problem}", file=sys.stderr)
        return 2
    device = _device(args.device)
    try:
        verdicts = check_file(args.file, args.op, device, sandbox=not args.no_sandbox, call_timeout_s=args.timeout_s)
    except FileNotFoundError as exc:
        print(f"hotshape check: {exc}", file=sys.stderr)
        return 2
    except KeyError as exc:
        print(f"hotshape check: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    ok = passed(verdicts)
    keys = ("problem_id", "stage", "compiled", "correct", "native", "fallbacks", "error", "max_abs_err",
            "t_measured_s")
    if args.json:
        print(json.dumps({"ok": ok, "device": device, "verdicts": [{k: v.get(k) for k in keys} for v in verdicts]},
                         default=str))
    else:
        for v in verdicts:
            timing = f" t={v['t_measured_s'] * 1e6:.2f}us" if v.get("t_measured_s") else ""
            print(f"{args.op} {v['problem_id']} ({device}): {v.get('stage')} compiled={bool(v.get('compiled'))} "
                  f"correct={bool(v.get('correct'))} native={bool(v.get('native'))}{timing}"
                  + (f"\n  error: {terminal(v['error'])}" if v.get("error") else "")
                  + (f"\n  fallbacks: {terminal(', '.join(v['fallbacks']))}" if v.get("fallbacks") else ""))
        print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def _eval_config(args: argparse.Namespace, release):
    from kernels_eval.harness.runner import EvalConfig, detect_hardware

    device = _device(args.device)
    return EvalConfig(device=device, call_timeout_s=args.timeout_s, sandbox=not args.no_sandbox,
                      hardware=detect_hardware(device, release.hardware_names))


def run_feedback(args: argparse.Namespace) -> int:
    """Per-problem feedback records of SUBMISSION on RELEASE (printed; nothing is written to any results)."""
    from kernels_eval.harness.sanitize import terminal  # candidate text, made inert for the terminal

    need_kernels()
    from kernels_eval.agent.feedback import feedback_json, submission_feedback
    from kernels_eval.agent.records import as_builtins
    from kernels_eval.harness.release_view import ReleaseViewError, read_release_view

    problem = _sandbox_problem(args.no_sandbox)
    if problem is not None:
        print(f"hotshape feedback: {problem}", file=sys.stderr)
        return 2
    from kernels_eval.selection import SelectionError, select_problems

    try:
        release = read_release_view(args.release)
        chosen = select_problems(release.problems, release.name, _csv(args.ops), _csv(args.problems))
    except (ReleaseViewError, SelectionError) as exc:
        print(f"hotshape feedback: {exc}", file=sys.stderr)
        return 2
    shapes = {p["problem_id"]: _shape(p) for p in chosen}
    records = submission_feedback(args.submission, release, _eval_config(args, release), ops=_csv(args.ops),
                                  problems=_csv(args.problems), ncu=args.ncu, maintainer=args.maintainer)
    if args.json:
        print(feedback_json(records))
        return 0
    for r in records:
        d = as_builtins(r)
        print(f"{r.problem_id} {r.operator} [{shapes.get(r.problem_id, '')}] w={r.weight or 0:.4g}: {r.stage} "
              f"compiled={r.compiled} "
              f"correct={r.correct} native={r.native}"
              + (f" t={r.t_measured_s * 1e6:.2f}us" if r.t_measured_s else "")
              + (f" roofline_fraction={r.roofline_fraction:.3f}" if r.roofline_fraction is not None else ""))
        if r.mismatch:
            print(f"  mismatch at {r.mismatch.where}: {r.mismatch.detail} (max abs err {r.mismatch.max_abs_err})")
        elif r.error:
            print(f"  error: {terminal(r.error)}")
        if r.adoption.fallbacks:
            print(f"  fallbacks: {terminal(', '.join(r.adoption.fallbacks))}")
        print(f"  kernels declared: {', '.join(r.adoption.declared_kernels) or 'none'}")
        for k in d["kernels"][:8]:
            print(f"  kernel {k['name']}: {k['time_us']:.2f} us")
        for k in d["profile"]:
            print(f"  ncu {k['name']}: {k['bound']}-bound, dram {k['dram_pct']:.0f}%, sm {k['sm_pct']:.0f}%, "
                  f"occupancy {k['occupancy_pct'] or 0:.0f}%, {k['time_us']:.2f} us")
        if r.note:
            print(f"  note: {r.note}")
    return 0


def _llm_proposer(args: argparse.Namespace, release):
    """The llm proposer for --op: endpoint from the environment, knowledge base without sealed passages."""
    from kernels_eval.agent.feedback import public_weights
    from kernels_eval.agent.knowledge import KnowledgeBase
    from kernels_eval.agent.proposers.llm import LLMProposer, endpoint_from_env
    from release.bundle import read_release
    from release.sealing import public_vocabulary, sealed_strings, split_exempt

    url, key, model = endpoint_from_env()
    full = read_release(args.release)
    sealed, _ = split_exempt(sealed_strings(full.sealed("provenance")),
                             public_vocabulary(full.manifest) | {"prefill", "decode", "mixed", "unknown"})
    weights = public_weights(release.path)
    problems = [{"problem_id": p["problem_id"], "init_kwargs": json.loads(p["init_kwargs"]),
                 "input_kwargs": json.loads(p["input_kwargs"]), "dtypes": json.loads(p.get("dtypes") or "{}"),
                 "weight": weights.get(p["problem_id"])} for p in release.problems if p["operator"] == args.op]
    kb = KnowledgeBase.build(sealed=sealed)
    return LLMProposer(args.op, problems, url=url, key=key, model=model, knowledge=kb, sealed=sealed)


def run_optimize(args: argparse.Namespace) -> int:
    """The measure-revise loop for one operator; the accepted file and the audit trail under --out."""
    need_kernels()
    from kernels_eval.agent.optimize import optimize
    from kernels_eval.harness.release_view import ReleaseViewError, read_release_view

    problem = _sandbox_problem(args.no_sandbox)
    if problem is not None:
        print(f"hotshape optimize: {problem}", file=sys.stderr)
        return 2
    from kernels_eval.selection import SelectionError, select_problems

    try:
        release = read_release_view(args.release)
        select_problems(release.problems, release.name, [args.op], _csv(args.problems))
    except (ReleaseViewError, SelectionError) as exc:
        print(f"hotshape optimize: {exc}", file=sys.stderr)
        return 2
    if args.proposer == "llm":
        from kernels_eval.agent.proposers.llm import LLMError

        try:
            proposer = _llm_proposer(args, release)
        except LLMError as exc:
            print(f"hotshape optimize: {exc}", file=sys.stderr)
            return 2
    else:
        from kernels_eval.agent.proposers.search import SearchProposer

        proposer = SearchProposer()
    config = _eval_config(args, release)
    log = None if args.json else (lambda text: print(text, file=sys.stderr))
    summary = optimize(args.op, release, args.start, proposer, config, args.out, budget=args.budget,
                       dropout_after=args.dropout_after, min_gain=args.min_gain, problems=_csv(args.problems),
                       log=log, ncu=args.ncu)
    if args.json:
        print(json.dumps(summary, default=str))
    else:
        fmt = lambda t: "n/a" if t is None else f"{t * 1e6:.2f} us"  # noqa: E731
        print(f"{args.op}: {summary['iterations']} candidates, accepted {summary['accepted'] or 'none'}, "
              f"{summary['dropouts']} dropouts; weighted time {fmt(summary['start_weighted_time_s'])} -> "
              f"{fmt(summary['best_weighted_time_s'])}; audit trail in {args.out}")
        if summary["note"]:
            print(summary["note"])
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when present")
    p.add_argument("--timeout-s", type=float, default=120.0, help="deadline of one worker call")
    p.add_argument("--no-sandbox", action="store_true", help="run the candidate without bubblewrap")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")


def register(subparsers) -> None:
    """Add `workspace`, `check`, `feedback` and `optimize` to the hotshape command."""
    w = subparsers.add_parser("workspace", help="write what an agent may see of a release: one folder per operator")
    w.add_argument("release", help="release directory (a hotshape release, or an imported Atrex-Bench one)")
    w.add_argument("--out", required=True, help="workspace directory to create (refused if it exists)")
    w.add_argument("--ops", help="comma-separated operators (default: all in the release)")
    w.add_argument("--layout", choices=("hotshape", "atrex"), default="hotshape",
                   help="atrex: Atrex-Bench's data/<op>/{shapes,metadata}.json layout (public fields only)")
    w.add_argument("--weights", default=None, help="weights version (default: the latest)")
    w.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    w.set_defaults(func=run_workspace)

    c = subparsers.add_parser("check", help="compile and correctness of one file on its operator's smoke shapes")
    c.add_argument("file", help="the candidate <operator>.py, defining class Model")
    c.add_argument("--op", required=True, help="the operator the file implements (a name the registry knows)")
    _common(c)
    c.set_defaults(func=run_check)

    f = subparsers.add_parser("feedback", help="per-problem feedback records of a submission for a revising agent")
    f.add_argument("submission", help="directory of <operator>.py files, each defining class Model")
    f.add_argument("--release", required=True, help="release directory (a hotshape release, or an imported Atrex-Bench one)")
    f.add_argument("--ops", help="comma-separated operators (default: all in the release)")
    f.add_argument("--problems", help="comma-separated problem ids (default: all of the chosen operators')")
    f.add_argument("--ncu", action="store_true", help="profile each problem with Nsight Compute (GPU; unsandboxed)")
    f.add_argument("--maintainer", action="store_true", help="include roofline figures (from the sealed release)")
    _common(f)
    f.set_defaults(func=run_feedback)

    o = subparsers.add_parser("optimize", help="propose, evaluate, revise: the measure-revise loop for one operator")
    o.add_argument("--op", required=True, help="the operator to optimise (one of the release's)")
    o.add_argument("--release", required=True, help="release directory (a hotshape release, or an imported Atrex-Bench one)")
    o.add_argument("--from", dest="start", required=True, help="the starting file")
    o.add_argument("--budget", type=int, default=8, help="candidates after the starting file")
    o.add_argument("--proposer", choices=("search", "llm"), default="search",
                   help="search: tile and launch-parameter search; llm: a language model endpoint (docs/agent.md)")
    o.add_argument("--dropout-after", type=int, default=3, help="restart the proposer after K without improvement")
    o.add_argument("--min-gain", type=float, default=0.01,
                   help="gain in weighted time or S_op an accepted file must exceed (the other may not lose more)")
    o.add_argument("--problems", help="comma-separated problem ids (default: all of the operator's)")
    o.add_argument("--ncu", action="store_true",
                   help="profile each accepted file with Nsight Compute on its heaviest problem (GPU; unsandboxed)")
    o.add_argument("--out", required=True, help="directory: accepted file, iterations/problems.parquet, summary")
    _common(o)
    o.set_defaults(func=run_optimize)
