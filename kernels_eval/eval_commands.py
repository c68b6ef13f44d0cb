"""`hotshape eval`, `score` and `leaderboard`: evaluate a submission against a release; score and rank stored
results."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# Imports inside functions: `hotshape` imports this module to build its parser (pipelines/cli.py), so each
# command loads only what it runs.

PROBLEM_KEYS = ("problem_id", "operator", "stage", "compiled", "correct", "native", "fallbacks", "error",
                "t_measured_s", "roofline_fraction")
_CPU_DEVICES = "hotshape eval: --devices needs --device cuda (a CPU run uses one interpreter worker at a time)"


def _csv(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def eval_summary(rows: list[dict]) -> dict:
    """Counts and rates over a run's rows (unweighted; `hotshape score` gives the weighted ones)."""
    n = len(rows)
    stages: dict[str, int] = {}
    for r in rows:
        stages[r["stage"]] = stages.get(r["stage"], 0) + 1
    rate = (lambda k: sum(bool(r[k]) for r in rows) / n) if n else (lambda k: None)
    return {"problems": n, "operators": len({r["operator"] for r in rows}),
            "hardware": rows[0]["hardware"] if rows else None, "run": rows[0]["run"] if rows else None,
            "compile_rate": rate("compiled"), "correct_rate": rate("correct"), "native_rate": rate("native"),
            "performance_measured": sum(bool(r["performance_measured"]) for r in rows), "stages": stages}


class RecordedRun:
    """A run's rows as stored (signed), where they went, and how many came from the cut run it resumed."""

    def __init__(self, rows: list[dict], out: Path, journal: Path, resumed: int) -> None:
        self.rows, self.out, self.journal, self.resumed = rows, out, journal, resumed


def evaluate_to(out: str | Path, submission: str | Path, release, config, *, ops=None, problems=None,
                progress=None, resume: bool = False, on_start=None, devices: list[int] | None = None,
                lanes: int = 1) -> RecordedRun:
    """A run of SUBMISSION on RELEASE recorded in results file `out`: --out checked first, each row signed
    with the host key and journalled as it is judged, all merged into `out` at the end. `resume` continues
    the latest cut run of the same submission, release and hardware, skipping problems it judged with the
    same files. A ResultsWriteError names the file when something cannot be written (the journal keeps
    every row judged by then). `progress(row)` hears each row as it is kept; `on_start(n)` how many
    problems the resumed run had judged. `devices` (CUDA indices) shards the operators over those GPUs
    (runner.evaluate): their rows come to this one journal, signed here, outside every sandbox; `lanes` judges
    that many operators at once per device, timed calls alone on it (harness/gate.py)."""
    from kernels_eval.harness.runner import evaluate, file_sha256, new_run_id, release_identity
    from kernels_eval.harness.sanitize import row as clean_row
    from kernels_eval.harness.submission import operator_files
    from kernels_eval.results_key import host_key, row_verifies, sign_row
    from kernels_eval.results_schema import next_run
    from kernels_eval.results_store import Journal, ResultsWriteError, check_out, journal_runs, merge_rows

    out, submission = Path(out), Path(submission)
    check_out(out)
    try:
        key = host_key()
    except ValueError as exc:  # a damaged key file: no row may be signed with it
        raise ResultsWriteError(str(exc)) from exc
    identity = {"submission": submission.name, "release": release.name,
                "release_digest": release_identity(release)["release_digest"], "hardware": config.hardware,
                "device": config.device}
    journal = Journal.resume(out, identity, lambda row: row_verifies(row, key)) if resume else None
    if journal is None:
        if resume:
            print(f"no cut run of {submission.name} to resume beside {out}; starting a new run", file=sys.stderr)
        config.run = max([next_run(out, submission.name, config.hardware),
                          *(r + 1 for r in journal_runs(out, submission.name, config.hardware))])
        journal = Journal.create(out, {**identity, "run": config.run, "run_id": new_run_id()})
    else:
        config.run = journal.header["run"]
        shas = {op: file_sha256(f) for op, f in operator_files(submission).items()}
        journal.rows = {pid: r for pid, r in journal.rows.items() if r["file_sha256"] == shas.get(r["operator"])}
    resumed = len(journal.rows)
    if on_start is not None:
        on_start(resumed)
    def record(row: dict) -> dict:
        # cleaned before it is signed: a row must encode whatever the candidate's process sent (harness/sanitize.py)
        stored = journal.append(sign_row(clean_row({**row, "run_sealed": True}), key))
        if progress is not None:  # from the sink, which hears every row (a missing file's too), as it is kept
            progress(row)
        return stored

    evaluate(submission, release, config=config, ops=ops, problems=problems, sink=record, skip=set(journal.rows),
             run_id=journal.header["run_id"], devices=devices, lanes=lanes)
    rows = list(journal.rows.values())
    try:
        merge_rows(rows, out, skip_present=True, key=key)
    except (OSError, ValueError) as exc:  # ValueError: a row the schema refused; the journal still holds it
        raise ResultsWriteError(f"{exc}; the run's {len(rows)} rows are kept in {journal.path}: free the space and "
                        f"rerun with --resume to write them") from exc
    journal.remove()
    return RecordedRun(rows, out, journal.path, resumed)


def run_eval(args: argparse.Namespace) -> int:
    """Evaluate SUBMISSION on RELEASE's problems; append the rows to --out as a new run (or the cut one).
    Exit 2 for bad input, 1 when no problem passed every stage."""
    from kernels_eval.agent.commands import need_kernels

    need_kernels()
    from kernels_eval.eval_progress import EvalProgress
    from kernels_eval.harness.release_view import ReleaseViewError, read_release_view
    from kernels_eval.harness.runner import EvalConfig, detect_hardware
    from kernels_eval.run_summary import operator_summaries, passed, summary_lines
    from kernels_eval.selection import SelectionError, select_problems

    if args.devices is not None and args.device == "cpu":  # before reading anything: a usage error
        print(_CPU_DEVICES, file=sys.stderr)
        return 2
    if args.lanes < 1:
        print(f"hotshape eval: --lanes {args.lanes}: at least 1", file=sys.stderr)
        return 2
    if args.repeat < 1:
        print(f"hotshape eval: --repeat {args.repeat}: at least 1", file=sys.stderr)
        return 2
    try:
        release = read_release_view(args.release)  # pyarrow only: GPU machines have no polars
        ops, problems = _csv(args.ops), _csv(args.problems)
        chosen = select_problems(release.problems, release.name, ops, problems)
    except (ReleaseViewError, SelectionError) as exc:
        print(f"hotshape eval: {exc}", file=sys.stderr)
        return 2
    if not Path(args.submission).is_dir():
        print(f"hotshape eval: {args.submission}: not a directory (a submission is a directory of <operator>.py "
              f"files)", file=sys.stderr)
        return 2
    print(f"release {args.release}: {release.integrity}", file=sys.stderr)
    device = args.device or _default_device()
    devices = None
    if args.devices is not None:
        if device != "cuda":
            print(_CPU_DEVICES, file=sys.stderr)
            return 2
        import torch

        from kernels_eval.harness.shard import parse_devices

        try:
            devices = parse_devices(args.devices, torch.cuda.device_count())
        except ValueError as exc:
            print(f"hotshape eval: {exc}", file=sys.stderr)
            return 2
    hardware = detect_hardware(device, release.hardware_names)
    if not args.no_sandbox:
        from kernels_eval.harness.sandbox import check_bwrap

        problem = check_bwrap()
        if problem is not None:
            print(f"hotshape eval: {problem}", file=sys.stderr)
            return 2
    from kernels_eval.harness.limits import CgroupRequired, memory_accounting

    try:  # before any problem is judged, like the sandbox's check
        memory_accounting(require_cgroup=not args.no_memory_cgroup)
    except CgroupRequired as exc:
        print(f"hotshape eval: {exc}", file=sys.stderr)
        return 2
    config = EvalConfig(device=device, sets=args.sets, call_timeout_s=args.timeout_s,
                        memory_gb=args.memory_gb, hardware=hardware, sandbox=not args.no_sandbox,
                        memory_cgroup=not args.no_memory_cgroup,
                        max_processes=args.max_processes, keep_logs=Path(args.logs) if args.logs else None)
    if args.timing_budget_s is not None:
        config.timing_budget_s = args.timing_budget_s
    if not args.no_triton_cache:
        from kernels_eval.harness.triton_cache import default_root

        config.triton_cache = Path(args.triton_cache) if args.triton_cache else default_root()
    config.time_reference = args.time_reference
    config.repeat = args.repeat
    config.autotune = args.autotune
    if args.autotune_store:
        config.autotune_store = Path(args.autotune_store)

    # stderr only, so --json on stdout stays clean; a bar on a terminal, plain lines into a log with --progress
    progress = EvalProgress(chosen) if args.progress or sys.stderr.isatty() else None
    try:
        recorded = evaluate_to(args.out, args.submission, release, config, ops=ops, problems=problems,
                               progress=progress, resume=args.resume, devices=devices, lanes=args.lanes,
                               on_start=progress.resumed if progress is not None else None)
    except OSError as exc:  # ResultsWriteError and the host key's errors name their file
        print(f"hotshape eval: {exc}", file=sys.stderr)
        return 2
    finally:
        if progress is not None:
            progress.close()
    rows = recorded.rows
    summary = eval_summary(rows)
    operators = operator_summaries(rows)
    n_passed = passed(rows)
    if args.json:
        print(json.dumps({"problems": [{k: r[k] for k in PROBLEM_KEYS} for r in rows], "summary": summary,
                          "operators": [o.as_dict() for o in operators], "passed": n_passed,
                          "resumed": recorded.resumed}, default=str))
    else:
        for line in summary_lines(operators):
            print(line)
        resumed = f" ({recorded.resumed} judged before the cut, kept)" if recorded.resumed else ""
        print(f"{summary['problems']} problems{resumed}: {n_passed} done, {len(rows) - n_passed} failed; compile "
              f"{summary['compile_rate']:.0%}, correct {summary['correct_rate']:.0%}, native "
              f"{summary['native_rate']:.0%}; results in {args.out}")
    if rows and n_passed == 0:
        print(f"hotshape eval: no problem of {args.submission} passed every stage ({len(rows)} judged)",
              file=sys.stderr)
        return 1
    return 0


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _read_release(command: str, path: str):
    """The release at `path`, or None after saying why on stderr."""
    from release.bundle import ReleaseError, read_release

    try:
        release = read_release(path)
    except ReleaseError as exc:
        print(f"hotshape {command}: {exc}", file=sys.stderr)
        return None
    print(f"release {path}: {release.check.summary()}", file=sys.stderr)
    return release


def _results_problem(path: str) -> str | None:
    """Why `path` cannot be read as a results file (one line naming it), or None when it can."""
    from kernels_eval.results_schema import read_results

    if not Path(path).is_file():
        return f"{path}: no such results file"
    try:
        read_results(path)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError: not Parquet, or truncated
        text = " ".join(str(exc).split())
        return text if text.startswith(str(path)) else f"{path}: not a results file ({text})"
    return None


def _weights_problem(release, version: str | None) -> str | None:
    """Why `version` names no weights version of `release`, or None when it does."""
    from release.bundle import ReleaseError

    try:
        release.weights(version)
    except (ReleaseError, ValueError) as exc:
        return str(exc)
    return None


def run_score(args: argparse.Namespace) -> int:
    """Score RESULTS under a weights version of RELEASE, from the rows this host signed against it."""
    from kernels_eval.results_verify import ResultsRejected, check_results
    from kernels_eval.score_display import score_lines
    from kernels_eval.scoring import score

    # a results file that cannot be read is the one line, before the release's verification line
    problem = _results_problem(args.results)
    release = None if problem else _read_release("score", args.release)
    if release is None and not problem:
        return 2
    problem = problem or _weights_problem(release, args.weights)
    if problem:
        print(f"hotshape score: {problem}", file=sys.stderr)
        return 2
    try:
        checked = check_results(args.results, release, submission=args.submission,
                                exclude_unverified=args.exclude_unverified)
    except ResultsRejected as exc:
        print(f"hotshape score: {exc}", file=sys.stderr)
        return 2
    if args.submission is not None and checked.total == 0:
        from kernels_eval.results_schema import read_results
        from kernels_eval.selection import did_you_mean

        names = sorted(set(read_results(args.results).column("submission").to_pylist()))
        print(f"hotshape score: {args.results}: no rows for submission {args.submission!r}"
              f"{did_you_mean(args.submission, names)}; it has {', '.join(names) or 'no rows'}", file=sys.stderr)
        return 2
    from kernels_eval.library.line import library_scores, split_baseline, versus_library

    rows, baseline_rows = split_baseline(checked.rows)  # the library line is scored apart, never as a submission
    if args.library:
        problem = _results_problem(args.library)
        if problem:
            print(f"hotshape score: {problem}", file=sys.stderr)
            return 2
        try:
            extra = check_results(args.library, release, exclude_unverified=args.exclude_unverified)
        except ResultsRejected as exc:
            print(f"hotshape score: {exc}", file=sys.stderr)
            return 2
        import polars as pl

        baseline_rows = pl.concat([baseline_rows, split_baseline(extra.rows)[1]], how="vertical_relaxed")
    scores = score(rows, release, args.weights) if rows.height else []
    library = library_scores(baseline_rows, release, args.weights)
    for s in scores:
        s["vs_library"] = versus_library(s, rows, release, library.get(s["hardware"]), args.weights)
    notes = []
    if checked.unverified:
        notes.append(f"{checked.unverified} of {checked.total} rows excluded: signature not verified")
    if checked.other_release:
        notes.append(f"{checked.other_release} of {checked.total} rows excluded: made against another release")
    if checked.earlier_version:
        notes.append(f"{checked.earlier_version} rows were made before the release's last refresh (same problems)")
    unsandboxed = int((~rows["sandboxed"].fill_null(False)).sum()) if rows.height else 0  # a baseline runs no candidate
    if unsandboxed:
        notes.append(f"{unsandboxed} rows ran unsandboxed")
    if checked.broken_seal:
        notes.append(f"{checked.broken_seal} of {checked.total} rows excluded: their run's seal fails (rows deleted "
                     "or added)")
    if checked.below_roofline:
        notes.append(f"{checked.below_roofline} of {checked.total} rows excluded: timed below their roofline")
    if checked.unsealed:
        notes.append(f"{checked.unsealed} rows are of runs made before sealing (a deleted row there goes unseen)")
    if args.report:
        from kernels_eval.report import write_score_report
        from kernels_eval.scoring import problem_scores, with_release_roofline

        per_problem = problem_scores(with_release_roofline(rows, release)) if rows.height else None
        written = write_score_report(args.report, scores, per_problem, f"Scores of {args.results} on {release.name}",
                                     library=list(library.values()))
        print(f"report: {written}", file=sys.stderr)
    if args.json:
        print(json.dumps({"scores": scores, "library": list(library.values()), "rows": checked.total, "excluded_unverified": checked.unverified,
                          "excluded_other_release": checked.other_release, "unsandboxed": checked.unsandboxed,
                          "excluded_broken_seal": checked.broken_seal,
                          "excluded_below_roofline": checked.below_roofline, "unsealed": checked.unsealed,
                          "earlier_version": checked.earlier_version}))
        return 0
    for note in notes:
        print(note)
    if not scores and not library:
        print("no verified rows to score")
    from kernels_eval.library.display import library_lines, library_summary, versus_lines

    for s in scores:
        for line in score_lines(s):
            print(line)
        if s["vs_library"]:
            for line in versus_lines(s["vs_library"], s["performance_measured"], per_problem=args.per_problem):
                print(line)
    for lib in library.values():  # its operators are in each score's table above; alone, its own table
        beside = any(s["hardware"] == lib["hardware"] for s in scores)
        for line in [library_summary(lib)] if beside else library_lines(lib):
            print(line)
    return 0


def run_leaderboard(args: argparse.Namespace) -> int:
    """Rank the submissions of several results files on one release."""
    from kernels_eval.leaderboard import leaderboard, leaderboard_html, leaderboard_lines, verified_rows
    from kernels_eval.results_verify import ResultsRejected

    problem = next(filter(None, map(_results_problem, args.results)), None)
    release = None if problem else _read_release("leaderboard", args.release)
    if release is None and not problem:
        return 2
    problem = problem or _weights_problem(release, args.weights)
    if problem:
        print(f"hotshape leaderboard: {problem}", file=sys.stderr)
        return 2
    try:
        rows, notes = verified_rows(args.results, release, exclude_unverified=args.exclude_unverified)
    except ResultsRejected as exc:
        print(f"hotshape leaderboard: {exc}", file=sys.stderr)
        return 2
    from kernels_eval.library.line import library_scores, split_baseline, versus_library

    rows, baseline_rows = split_baseline(rows)  # the library line: shown beside the ranking, never in it
    entries = leaderboard(rows, release, args.weights)
    library = library_scores(baseline_rows, release, args.weights) if baseline_rows.height else {}
    for e in entries:
        e["vs_library"] = versus_library(e, rows, release, library.get(e["hardware"]), args.weights)
    libraries = list(library.values())
    if args.html:
        out = Path(args.html)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(leaderboard_html(entries, f"Leaderboard on {release.name}", libraries), encoding="utf-8")
        print(f"report: {out}", file=sys.stderr)
    if args.json:
        print(json.dumps({"leaderboard": entries, "library": libraries, "notes": notes}))
        return 0
    for line in notes + leaderboard_lines(entries, libraries):
        print(line)
    return 0


def run_export_flashinfer(args: argparse.Namespace) -> int:
    """Write RELEASE's problems as FlashInfer-Trace definitions and workloads under --out, leak-checked."""
    from kernels_eval.agent.commands import need_kernels

    need_kernels()
    from kernels_eval.flashinfer import export_flashinfer
    from kernels_eval.selection import unknown_names
    from release.sealing import assert_no_leak, public_vocabulary, sealed_strings

    release = _read_release("export-flashinfer", args.release)
    if release is None:
        return 2
    ops = _csv(args.ops)
    errors = unknown_names(ops, release.manifest["operator"].to_list(), "operator", f"release {release.name}")
    if errors:
        print(f"hotshape export-flashinfer: {'; '.join(errors)}", file=sys.stderr)
        return 2
    summary = export_flashinfer(release, args.out, ops)
    # the same check a release's public/ passes: nothing of the sealed provenance in what goes out
    assert_no_leak(args.out, sealed_strings(release.sealed("provenance")), public_vocabulary(release.manifest))
    if args.json:
        print(json.dumps(summary))
        return 0
    for why in (*summary["skipped"].values(), *summary["skipped_problems"].values()):
        print(f"not exported: {why}")
    print(f"{summary['definitions']} definitions, {summary['workloads']} workloads -> {args.out} (leak check passed)")
    return 0 if summary["definitions"] else 1


def register(subparsers) -> None:
    """Add `eval` and `score` to the hotshape command."""
    e = subparsers.add_parser("eval", help="evaluate a submission directory against a release")
    e.add_argument("submission", help="directory of <operator>.py files, each defining class Model")
    e.add_argument("--release", required=True, help="release directory (a hotshape release, or an imported Atrex-Bench one)")
    e.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="cuda: every problem on its shape, timed; cpu: Triton interpreter on smoke shapes")
    e.add_argument("--devices", default=None, metavar="0,1,...|all",
                   help="cuda only: shard the operators over these GPUs, longest first, one sandboxed worker per GPU "
                        "at a time; rows go to one results file with their device_index")
    e.add_argument("--lanes", type=int, default=1,
                   help="operators judged at once per device, one sandboxed worker each: compiling and checking "
                        "overlap, timed calls run alone on the device (default 1)")
    e.add_argument("--ops", help="comma-separated operators (default: all in the release)")
    e.add_argument("--problems", help="comma-separated problem ids")
    e.add_argument("--out", required=True, help="results Parquet file (rows are appended as a new run)")
    e.add_argument("--sets", type=int, default=3, help="fresh random input sets per problem")
    e.add_argument("--timeout-s", type=float, default=120.0, help="deadline of one worker call")
    e.add_argument("--memory-gb", type=float, default=None,
                   help="host memory limit of a worker and its children (default: half the machine's memory, "
                        "at most all but 4 GiB)")
    e.add_argument("--max-processes", type=int, default=64, help="processes a worker may run at once")
    e.add_argument("--no-memory-cgroup", action="store_true",
                   help="where no cgroup can be made, count a worker's memory as its processes' RSS plus the memfd/shm "
                        "files they hold (rows say memory_accounting = process) instead of refusing to run")
    e.add_argument("--no-sandbox", action="store_true",
                   help="run candidates without bubblewrap (results are marked unsandboxed)")
    e.add_argument("--timing-budget-s", type=float, default=None, help="timed seconds per problem")
    e.add_argument("--triton-cache", metavar="DIR",
                   help="root of the Triton compile caches, one per operator file's sha256, reused by later runs "
                        "of the same file (default: $XDG_CACHE_HOME/hotshape/triton or ~/.cache/hotshape/triton)")
    e.add_argument("--no-triton-cache", action="store_true",
                   help="compile every kernel afresh in a cache of this run only (a cold run)")
    e.add_argument("--time-reference", action="store_true",
                   help="also time the PyTorch reference (t_reference_s, speedup); scores use the roofline")
    e.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="time each problem N times (full timings); the row keeps each timing's median "
                        "(t_repeats_s) and scores their median; score and leaderboard give S_agg an interval "
                        "from them (docs/reproducibility.md)")
    e.add_argument("--autotune", choices=("triton", "protocol"), default="triton",
                   help="triton (default): Triton's autotuner picks in the candidate's process (fast, noisy); "
                        "protocol: the evaluator times the configurations of each autotuned kernel with its own "
                        "timing and keeps the choice per file, tuning key and hardware - use it for a leaderboard "
                        "(docs/reproducibility.md says what it costs)")
    e.add_argument("--autotune-store", metavar="DIR",
                   help="where the autotuning protocol keeps its choices (default: $XDG_CACHE_HOME/hotshape/autotune "
                        "or ~/.cache/hotshape/autotune); copy it to another machine to score with the same choices")
    e.add_argument("--logs", help="keep each worker's output in this directory")
    e.add_argument("--resume", action="store_true",
                   help="continue the cut run of this submission into --out (problems already judged are kept)")
    e.add_argument("--progress", action="store_true",
                   help="show progress on stderr even when it is not a terminal (one line per problem)")
    e.add_argument("--json", action="store_true", help="print the run's summary as JSON on stdout")
    e.set_defaults(func=run_eval)

    s = subparsers.add_parser("score", help="score evaluation results under a release's weights")
    s.add_argument("results", help="results file (Parquet) written by hotshape eval")
    s.add_argument("--release", required=True, help="release directory (a hotshape release, or an imported Atrex-Bench one)")
    s.add_argument("--weights", default=None, help="weights version (vN; default: the latest)")
    s.add_argument("--submission", default=None, help="only this submission's rows")
    s.add_argument("--exclude-unverified", action="store_true",
                   help="score without the rows whose signature or release does not verify (default: refuse)")
    s.add_argument("--report", metavar="FILE.html",
                   help="also write an offline HTML report (per-operator table, contribution and roofline plots)")
    s.add_argument("--library", metavar="RESULTS",
                   help="a results file holding baseline rows (hotshape baseline) to show beside the scores; baseline "
                        "rows in RESULTS itself are shown the same way")
    s.add_argument("--per-problem", action="store_true",
                   help="with baseline rows (hotshape baseline) in the results: each problem's roofline, library and "
                        "submission times and S side by side")
    s.add_argument("--json", action="store_true", help="print the scores as JSON on stdout")
    s.set_defaults(func=run_score)

    b = subparsers.add_parser("leaderboard", help="rank several submissions' results on one release")
    b.add_argument("results", nargs="+", help="results files (any number of submissions each)")
    b.add_argument("--release", required=True, help="release directory (a hotshape release, or an imported Atrex-Bench one)")
    b.add_argument("--weights", default=None, help="weights version (vN; default: the latest)")
    b.add_argument("--exclude-unverified", action="store_true",
                   help="rank without the rows whose signature or release does not verify (default: refuse)")
    b.add_argument("--html", metavar="FILE.html", help="also write the ranking and S_op matrix as offline HTML")
    b.add_argument("--json", action="store_true", help="print the leaderboard as JSON on stdout")
    b.set_defaults(func=run_leaderboard)

    f = subparsers.add_parser("export-flashinfer", help="write a release's problems as FlashInfer-Trace definitions "
                                                        "and workloads")
    f.add_argument("release", help="release directory (a hotshape release, or an imported Atrex-Bench one)")
    f.add_argument("--out", required=True, help="dataset directory (definitions/, workloads/, hotshape_weights.json)")
    f.add_argument("--ops", help="comma-separated operators (default: all in the release)")
    f.add_argument("--json", action="store_true", help="print the summary (definitions, workloads, what was left out) as JSON")
    f.set_defaults(func=run_export_flashinfer)
