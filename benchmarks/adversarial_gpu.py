"""Every adversarial submission (tests/adversarial/, the same case files the CPU tests run) through `hotshape eval`
in the bubblewrap sandbox, on a GPU (issue 38): one table of what each got and whether it was contained.

Each case is evaluated on the smallest and the largest problem of its operator(s) by `hotshape eval --device
DEVICE` in a process of its own (the eval command alone, built from kernels_eval.eval_commands as
tests/kernels_eval/test_sandbox.py does: no polars, duckdb or dagster needed), on its own copy of --release (under
OUT/cases/CASE/hotshape-sandbox-test/, so a case that escaped writes there, never to the release given); then its
results file is checked as `hotshape score` checks it first (rows signed, the run's seal). Every case runs, also
those whose expected.json lists only `cpu` (their verdict there is not judged as expected or not; containment is).
Needs torch, triton, pyarrow and pyyaml only:

    HOTSHAPE_BWRAP=/tmp/bw/usr/bin/bwrap python3 benchmarks/adversarial_gpu.py --release out/atrex-release \
        --out OUT [--device cuda] [--cases a,b] [--jobs N] [--budget-s S] [--fresh]

A case is contained when every one of these holds (the `why` column names the first that fails, or what held):
- the eval ended within its limit (no hang) and wrote a results file of one signed row per problem whose run seal
  agrees (none lost, none added); its release copy is byte-identical afterwards, nothing named FORGED* lies
  beside its results, no process named hotshape-escape-marker is left (one under the eval of a case still running
  beside it is that case's) and nothing new named hotshape-escape* is in /tmp (with --jobs above 1 this last may be
  seen by a case running beside the one that left it);
- no row's roofline fraction is above 1, and (cases with `"time_floor": "honest"`) no row is timed under 0.8x the
  honest submission's time on the same problem (their kernels do at least the honest work);
- the case gets no credit its class is denied: a host-compute or fallback case (expected correct and not native)
  is not native; a wrong-output case (expected to fail at correctness) is not correct.
`as expected` says separately whether the verdict is exactly expected.json's (a case may be contained by a stricter
verdict than expected). Each case's rows go to OUT/cases/CASE.json as it finishes (a rerun skips the cases found
there unless --fresh, so a run cut by --budget-s or a time limit continues); OUT/adversarial_gpu.json holds all
of them. Exit status 0 when every case was contained, 1 when one was not, 3 when --budget-s stopped the run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernels_eval.harness.release_view import read_release_view  # noqa: E402

ADVERSARIAL = REPO / "tests" / "adversarial"
VERDICT_KEYS = ("stage", "compiled", "correct", "native")
CLI = ("import sys, argparse\nfrom kernels_eval import eval_commands\n"
       "p = argparse.ArgumentParser(); s = p.add_subparsers(dest='c', required=True)\n"
       "eval_commands.register(s); a = p.parse_args(sys.argv[1:]); sys.exit(a.func(a))\n")
MARKER = "hotshape-escape-marker"  # argv of the sandbox cases' children (tests/adversarial/README.md)
FLOOR = 0.8  # a time_floor case's time may not fall under this fraction of the honest kernel's
CONFIG_FLAGS = {"call_timeout_s": "--timeout-s", "memory_gb": "--memory-gb"}  # expected.json "config" -> eval
RUNNING: dict[str, int] = {}  # case -> pid of its eval while it runs (survivors() leaves their processes out)
RUNNING_LOCK = threading.Lock()


def log(*args) -> None:
    print(*args, flush=True)


def error_expected(expected: dict, device: str) -> str:
    """The words a case's error must contain on `device` (`error_contains`: one string, or one per device)."""
    words = expected.get("error_contains", "")
    return words.get(device, "") if isinstance(words, dict) else words


def cases_for(device: str, only: list[str] | None, listed_only: bool) -> list[tuple[str, dict]]:
    """(name, expected) of every case (or those whose expected.json lists `device`), the honest one first (the
    time floor of the others)."""
    out = []
    for case in sorted(p for p in ADVERSARIAL.iterdir() if (p / "expected.json").is_file()):
        expected = json.loads((case / "expected.json").read_text())
        if (device in expected["devices"] or not listed_only) and (not only or case.name in only):
            out.append((case.name, expected))
    return sorted(out, key=lambda c: c[0] != "honest")


def chosen_problems(release, ops: list[str]) -> list[str]:
    """The smallest and the largest problem of each operator by interface bytes on H200."""
    size = {r["problem_id"]: r["bytes_read"] + r["bytes_written"] for r in release.roofline_rows
            if r["hardware"] == "H200"}
    out = []
    for op in ops:
        plist = sorted((p for p in release.problems if p["operator"] == op),
                       key=lambda p: (size.get(p["problem_id"], 0), p["problem_id"]))
        for p in plist[:1] + plist[-1:]:
            if p["problem_id"] not in out:
                out.append(p["problem_id"])
    return out


def snapshot(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def parent_pid(pid: int) -> int | None:
    """The parent of `pid` (/proc/PID/stat's fourth field), or None when it has gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # the name in parentheses may hold spaces


def descends_from(pid: int, roots: set[int]) -> bool:
    """Whether one of `roots` is `pid`'s parent, grandparent, ... (up to init)."""
    seen = set()
    while pid > 1 and pid not in seen:
        if pid in roots:
            return True
        seen.add(pid)
        pid = parent_pid(pid) or 0
    return False


def survivors(others: set[int] = frozenset()) -> list[int]:
    """Pids of processes whose command line names the escape marker, less those under one of `others` (the evals
    of the cases still running beside this one: a marker process inside their sandboxes is theirs, alive while
    they run; on one H200 a case's check once counted setsid_grandchild's, which ran beside it)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if MARKER.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return [pid for pid in found if not descends_from(pid, others)]


def results_intact(path: Path, n_problems: int) -> str | None:
    """None when the results file holds one row per problem, each signed with this host's results key, and its
    run's seal agrees with them (what `hotshape score` checks first: kernels_eval/results_verify.py, which needs
    polars; these are its polars-free parts); else what is wrong."""
    from kernels_eval.results_key import host_key, row_verifies
    from kernels_eval.results_schema import read_results
    from kernels_eval.results_seal import broken_runs, read_seals

    if not path.is_file():
        return "no results file"
    try:
        rows = read_results(path).to_pylist()
        key = host_key(create=False)
    except (OSError, ValueError) as exc:
        return f"results file unreadable: {exc}"[:200]
    if len(rows) != n_problems:
        return f"the results file holds {len(rows)} rows for {n_problems} problems"
    if not all(row_verifies(r, key) for r in rows):
        return "a results row's signature does not verify"
    broken = broken_runs(rows, read_seals(path), key)
    return f"run seal broken: {next(iter(broken.values()))}" if broken else None


def run_case(case: str, expected: dict, args, problems: list[str], honest: dict, env: dict) -> dict:
    """Evaluate one case on its own copy of the release and judge whether it was contained."""
    work = Path(args.out) / "cases" / case
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    release_copy = work / "hotshape-sandbox-test" / "release"  # where an escaped case writes, if anywhere
    shutil.copytree(args.release, release_copy)
    results = work / "results.parquet"
    listed = args.device in expected["devices"]
    config = expected.get("config", {})
    flags = []
    for key, value in config.items():
        if key in CONFIG_FLAGS:
            flags += [CONFIG_FLAGS[key], str(value)]
    if "call_timeout_s" not in config:
        flags += ["--timeout-s", str(args.call_timeout_s)]
    command = [sys.executable, "-c", CLI, "eval", str(ADVERSARIAL / case), "--release", str(release_copy),
               "--device", args.device, "--problems", ",".join(problems), "--out", str(results), "--json",
               "--triton-cache", str(Path(args.out) / "triton-cache"), "--logs", str(work / "logs"), *flags]
    if args.device == "cuda":
        command += ["--timing-budget-s", str(args.timing_budget_s)]
    before = snapshot(release_copy)
    tmp_before = set(os.listdir("/tmp"))
    began = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    with RUNNING_LOCK:
        RUNNING[case] = proc.pid
    try:
        try:
            stdout, stderr = proc.communicate(timeout=args.case_timeout_s)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            rc, stdout = None, ""
        seconds = time.monotonic() - began
        with RUNNING_LOCK:
            others = {pid for name, pid in RUNNING.items() if name != case}
        left = survivors(others)
    finally:
        with RUNNING_LOCK:
            RUNNING.pop(case, None)
    escaped_tmp = sorted(n for n in set(os.listdir("/tmp")) - tmp_before if n.startswith("hotshape-escape"))
    forged = sorted(n for n in os.listdir(work) if n.startswith("FORGED"))
    release_same = snapshot(release_copy) == before
    results_problem = results_intact(results, len(problems)) if rc is not None else None
    try:
        rows = json.loads(stdout)["problems"] if stdout.strip() else []
    except (json.JSONDecodeError, KeyError, TypeError):
        rows = []
    # what holds for the whole case (the host side)
    host = []
    if rc is None:
        host.append(f"hang: no end within {args.case_timeout_s:.0f} s")
    elif rc not in (0, 1):
        host.append(f"eval exited {rc}: {stderr.strip().splitlines()[-1] if stderr.strip() else ''}"[:200])
    if rc is not None and not rows:
        host.append("no rows in the eval's output")
    if results_problem:
        host.append(results_problem)
    if not release_same:
        host.append("the release copy changed")
    if forged:
        host.append(f"files written beside the results: {forged}")
    if left:
        host.append(f"escape-marker processes left: {left}")
    if escaped_tmp:
        host.append(f"new files in /tmp: {escaped_tmp}")
    want = expected["verdict"]
    words = error_expected(expected, args.device)
    out_rows = []
    for r in rows:
        got = {k: r[k] for k in VERDICT_KEYS if k in want}
        as_expected = got == want and words in (r["error"] or "") if listed else None
        why = list(host)
        fraction, t = r.get("roofline_fraction"), r.get("t_measured_s")
        if fraction is not None and fraction > 1:
            why.append(f"timed under its roofline (fraction {fraction:.2f})")
        floor = honest.get(r["problem_id"])
        ratio = t / floor if t and floor else None
        if expected.get("time_floor") == "honest" and ratio is not None and ratio < FLOOR:
            why.append(f"timed at {ratio:.2f}x the honest kernel's time")
        if want.get("correct") and want.get("native") is False and r["native"]:
            why.append("judged native (its class computes off its own kernels)")
        if want.get("stage") == "correctness" and r["correct"]:
            why.append("judged correct (its class returns wrong outputs)")
        contained = not why
        if contained:
            held = {"done": "done with the replay's time" if t else "done",
                    "adoption": "not native", "correctness": "wrong output refused",
                    "performance": "time refused", "compile": "failed before any verdict"}.get(r["stage"], r["stage"])
            why = [held + (f" ({ratio:.2f}x honest)" if ratio is not None and case != "honest" else "")
                   + ("" if as_expected is not False else "; verdict differs from expected.json")]
        out_rows.append({"case": case, "listed": listed, "problem_id": r["problem_id"], "operator": r["operator"],
                         **{k: r[k] for k in VERDICT_KEYS}, "t_measured_s": t, "roofline_fraction": fraction,
                         "honest_ratio": ratio, "as_expected": as_expected, "expected": want,
                         "contained": contained, "why": "; ".join(why),
                         "error": (r["error"] or "")[:600], "fallbacks": (r.get("fallbacks") or [])[:8]})
    if not rows:  # the case as one line: nothing came back to judge
        out_rows.append({"case": case, "listed": listed, "problem_id": None, "operator": expected.get("operator"),
                         **{k: None for k in VERDICT_KEYS}, "t_measured_s": None, "roofline_fraction": None,
                         "honest_ratio": None, "as_expected": False if listed else None, "expected": want,
                         "contained": False, "why": "; ".join(host) or "no rows", "error": stderr[-600:],
                         "fallbacks": []})
    doc = {"case": case, "device": args.device, "seconds": round(seconds, 1), "eval_rc": rc,
           "results": results_problem or "intact", "problems": problems, "rows": out_rows,
           "stderr_tail": stderr[-2000:]}
    (Path(args.out) / "cases" / f"{case}.json").write_text(json.dumps(doc, indent=1, default=str))
    return doc


def table(docs: list[dict]) -> list[str]:
    lines = [f"{'case':<22} {'problem':<17} {'stage':<12} {'corr':<5} {'nat':<5} {'time':>10} {'roof':>5} "
             f"{'exp':<3} {'contained'}"]
    for doc in docs:
        for r in doc["rows"]:
            t = "-" if r["t_measured_s"] is None else f"{r['t_measured_s'] * 1e6:.1f}us"
            roof = "-" if r["roofline_fraction"] is None else f"{r['roofline_fraction']:.2f}"
            lines.append(f"{r['case']:<22} {str(r['problem_id'])[:16]:<17} {str(r['stage']):<12} "
                         f"{_yn(r['correct']):<5} {_yn(r['native']):<5} {t:>10} {roof:>5} "
                         f"{_yn(r['as_expected']):<3} {'yes' if r['contained'] else 'NO'}: {r['why'][:110]}")
    return lines


def _yn(x) -> str:
    return "-" if x is None else "yes" if x else "no"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", required=True, help="release directory (copied; the copy is what cases see)")
    ap.add_argument("--out", required=True, help="directory for adversarial_gpu.json, cases/, the Triton cache")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--cases", default=None, help="comma-separated cases (default: every case)")
    ap.add_argument("--listed-only", action="store_true",
                    help="only the cases whose expected.json lists --device (default: every case; `as expected` "
                         "is judged only where it lists the device)")
    ap.add_argument("--fresh", action="store_true", help="run again the cases already recorded under --out")
    ap.add_argument("--jobs", type=int, default=1, help="cases evaluated at once (the honest one runs alone first)")
    ap.add_argument("--budget-s", type=float, default=0.0,
                    help="start no case past this many seconds less the longest case so far (exit 3: run again)")
    ap.add_argument("--call-timeout-s", type=float, default=30.0, help="a worker call's deadline (eval --timeout-s)")
    ap.add_argument("--case-timeout-s", type=float, default=420.0, help="one case's eval, beyond which it hangs")
    ap.add_argument("--timing-budget-s", type=float, default=0.1, help="timed seconds per problem (cuda)")
    ap.add_argument("--memory-cgroup", choices=("auto", "required"), default="auto",
                    help="auto: a cgroup where one can be made, else the workers' RSS and memfd/shm files")
    args = ap.parse_args()
    out = Path(args.out).absolute()
    args.out = str(out)
    (out / "cases").mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join([str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    env = {**os.environ, "PYTHONPATH": path, "HOTSHAPE_RELEASE_KEY": secrets.token_hex(16)}
    if args.memory_cgroup == "auto":
        env["HOTSHAPE_MEMORY_CGROUP"] = "optional"
    from kernels_eval.harness import sandbox

    problem = sandbox.check_bwrap()
    if problem is not None:
        log(f"adversarial_gpu: bubblewrap cannot run here ({problem}); set HOTSHAPE_BWRAP")
        return 2
    release = read_release_view(args.release)
    cases = cases_for(args.device, [c for c in args.cases.split(",") if c] if args.cases else None, args.listed_only)
    versions = subprocess.run([sys.executable, "-c", "import torch, triton; print(torch.__version__, "
                               "triton.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() "
                               "else 'no GPU')"], capture_output=True, text=True).stdout.strip()
    log(f"[adversarial] {len(cases)} cases on {args.device}; torch/triton/device: {versions}; bwrap "
        f"{os.environ.get('HOTSHAPE_BWRAP') or shutil.which('bwrap')}")
    began, longest = time.monotonic(), [60.0]
    honest: dict = {}
    todo = []
    for case, expected in cases:
        recorded = out / "cases" / f"{case}.json"
        if recorded.is_file() and not args.fresh:
            doc = json.loads(recorded.read_text())
            log(f"[adversarial] {case:<22} recorded before ({doc['seconds']} s); --fresh to run it again")
            if case == "honest":
                honest = _honest_times(doc)
        else:
            todo.append((case, expected))
    if todo and todo[0][0] == "honest":  # alone and first: the others' time floor
        doc = _run_logged("honest", todo.pop(0)[1], args, release, {}, env, longest)
        honest = _honest_times(doc)
    cut = False
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        running, submitted = set(), []
        for case, expected in todo:
            while len(running) >= max(1, args.jobs):
                done, running = wait(running, return_when=FIRST_COMPLETED)
            if args.budget_s and time.monotonic() - began + longest[0] > args.budget_s:
                cut = True
                break
            submitted.append((case, pool.submit(_run_logged, case, expected, args, release, honest, env, longest)))
            running.add(submitted[-1][1])
        wait(running)
    for case, future in submitted:
        if future.exception() is not None:
            log(f"[adversarial] {case:<22} NOT RUN: {type(future.exception()).__name__}: {future.exception()}")
    if cut:
        log(f"[adversarial] stopped within --budget-s {args.budget_s:.0f}: run the same command again to go on")
    docs = [json.loads((out / "cases" / f"{c}.json").read_text()) for c, _ in cases
            if (out / "cases" / f"{c}.json").is_file()]
    rows = [r for d in docs for r in d["rows"]]
    summary = {"device": args.device, "versions": versions, "release": str(args.release), "cases": len(docs),
               "rows": len(rows), "contained": sum(r["contained"] for r in rows),
               "as_expected": sum(r["as_expected"] is True for r in rows),
               "not_contained": sorted({r["case"] for r in rows if not r["contained"]}),
               "not_as_expected": sorted({r["case"] for r in rows if r["as_expected"] is False})}
    (out / "adversarial_gpu.json").write_text(json.dumps({"summary": summary, "cases": docs}, indent=1, default=str))
    for line in table(docs):
        log(line)
    log(f"[adversarial] {summary['contained']}/{summary['rows']} rows contained, {summary['as_expected']} as "
        f"expected; not contained: {summary['not_contained'] or 'none'}; differing from expected.json: "
        f"{summary['not_as_expected'] or 'none'}")
    if cut:
        return 3
    return 0 if summary["contained"] == summary["rows"] else 1


def _run_logged(case: str, expected: dict, args, release, honest: dict, env: dict, longest: list) -> dict:
    ops = expected.get("operators") or [expected["operator"]]
    doc = run_case(case, expected, args, chosen_problems(release, ops), honest, env)
    longest[0] = max(longest[0], doc["seconds"])
    held = all(r["contained"] for r in doc["rows"])
    log(f"[adversarial] {case:<22} {'contained' if held else 'NOT CONTAINED'} ({doc['seconds']} s)")
    return doc


def _honest_times(doc: dict) -> dict:
    return {r["problem_id"]: r["t_measured_s"] for r in doc["rows"] if r.get("t_measured_s")}


if __name__ == "__main__":
    sys.exit(main())
