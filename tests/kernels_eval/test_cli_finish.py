"""What a user of `hotshape eval/score/leaderboard` meets: per-operator counts, exit 1 when nothing passes, one-line
errors (exit 2) with a did-you-mean, progress on stderr, --version, the score table and HTML report, a leaderboard
of two submissions. Real releases, real `hotshape` processes, CPU."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kernels_eval.results_key import host_key, sign_row
from kernels_eval.results_schema import RESULTS, read_results
from tests.conftest import REPO

HOTSHAPE = str(Path(sys.executable).with_name("hotshape"))
ADVERSARIAL = REPO / "tests" / "adversarial"
OPS = "rms_norm,silu_and_mul"


def hotshape(*args) -> subprocess.CompletedProcess:
    return subprocess.run([HOTSHAPE, *map(str, args)], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module", autouse=True)
def module_key_dir(tmp_path_factory):
    """The session's results key for this module's fixtures too (the autouse one is per test)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOTSHAPE_KEY_DIR", str(tmp_path_factory.getbasetemp() / "results-key"))
        yield


def one_error(done: subprocess.CompletedProcess, command: str) -> str:
    """The one error line of a failed command (and no traceback)."""
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.startswith(f"hotshape {command}: ")]
    return line


@pytest.fixture(scope="module")
def release(atrex_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("release") / "atrex"
    done = hotshape("import-atrex", atrex_dir, "--out", out)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def mixed_submission(tmp_path_factory) -> Path:
    """An honest silu_and_mul beside an rms_norm done in PyTorch (correct, not native)."""
    sub = tmp_path_factory.mktemp("sub") / "mixed"
    sub.mkdir()
    shutil.copy(ADVERSARIAL / "honest" / "silu_and_mul.py", sub / "silu_and_mul.py")
    shutil.copy(ADVERSARIAL / "torch_fallback" / "rms_norm.py", sub / "rms_norm.py")
    return sub


@pytest.fixture(scope="module")
def honest_results(release, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("honest") / "results.parquet"
    done = hotshape("eval", ADVERSARIAL / "honest", "--release", release, "--device", "cpu", "--ops", OPS, "--out", out)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def fallback_results(release, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("fallback") / "results.parquet"
    done = hotshape("eval", ADVERSARIAL / "torch_fallback", "--release", release, "--device", "cpu", "--ops", OPS,
                    "--out", out, "--progress")
    return out, done


def test_version_comes_from_the_package_metadata():
    done = hotshape("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"hotshape {version('hotshape')}"


def test_summary_counts_each_operators_problems_by_stage(release, mixed_submission, tmp_path):
    done = hotshape("eval", mixed_submission, "--release", release, "--device", "cpu", "--ops", OPS,
                    "--out", tmp_path / "r.parquet", "--json")
    assert done.returncode == 0, done.stderr  # some problems passed
    doc = json.loads(done.stdout)  # progress stays off stdout (and off stderr: not a terminal)
    ops = {o["operator"]: o for o in doc["operators"]}
    rows = read_results(tmp_path / "r.parquet").to_pylist()
    n = {op: sum(r["operator"] == op for r in rows) for op in ops}
    assert ops["silu_and_mul"] | {"first_failure": None} == {
        "operator": "silu_and_mul", "problems": n["silu_and_mul"], "done": n["silu_and_mul"], "failed": 0,
        "failed_by_stage": {}, "first_failure": None}
    rms = ops["rms_norm"]
    assert (rms["problems"], rms["done"], rms["failed"], rms["failed_by_stage"]) == (
        n["rms_norm"], 0, n["rms_norm"], {"adoption": n["rms_norm"]})
    assert rms["first_failure"]["stage"] == "adoption" and rms["first_failure"]["error"]
    assert doc["passed"] == n["silu_and_mul"]
    text = hotshape("eval", mixed_submission, "--release", release, "--device", "cpu", "--ops", OPS,
                    "--out", tmp_path / "r2.parquet")
    assert re.search(rf"rms_norm +0/{n['rms_norm']} +done +failed: {n['rms_norm']} at adoption; first p\w+ "
                     r"\(adoption\): ", text.stdout), text.stdout
    assert re.search(rf"silu_and_mul +{n['silu_and_mul']}/{n['silu_and_mul']} +done$", text.stdout, re.M)


def test_eval_exits_1_when_no_problem_passes_and_shows_progress_lines(fallback_results):
    out, done = fallback_results
    assert done.returncode == 1, done.stderr
    total = read_results(out).num_rows
    assert one_error(done, "eval").endswith(f"passed every stage ({total} judged)")
    progress = [x for x in done.stderr.splitlines() if re.match(rf"p[0-9a-f]+ \d+/{total} ", x)]
    assert len(progress) == total and progress[-1].split()[1] == f"{total}/{total}"
    assert f"(done 0 failed {total}, eta " in progress[-1] and "token_count=" in done.stderr


@pytest.mark.parametrize("flag, value, expected", [
    ("--ops", "rms_nrom", "has no operator 'rms_nrom' (did you mean rms_norm"),
    ("--problems", "p0000", "has no problem 'p0000'"),
])
def test_unknown_operator_or_problem_is_bad_input(release, tmp_path, flag, value, expected):
    done = hotshape("eval", ADVERSARIAL / "honest", "--release", release, "--device", "cpu", flag, value,
                    "--out", tmp_path / "r.parquet")
    assert done.returncode == 2 and expected in one_error(done, "eval")
    assert not (tmp_path / "r.parquet").exists()


def test_eval_bad_inputs_are_one_line(release, tmp_path):
    done = hotshape("eval", ADVERSARIAL / "honest", "--release", tmp_path / "nosuch", "--device", "cpu",
                    "--out", tmp_path / "r.parquet")
    assert done.returncode == 2 and "nosuch" in one_error(done, "eval")
    done = hotshape("eval", tmp_path / "nosub", "--release", release, "--device", "cpu", "--ops", "rms_norm",
                    "--out", tmp_path / "r.parquet")
    assert done.returncode == 2 and f"{tmp_path / 'nosub'}: not a directory" in one_error(done, "eval")


def test_score_bad_inputs_are_one_line(release, honest_results, tmp_path):
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(honest_results.read_bytes()[:200])
    cases = [((honest_results, "--release", tmp_path / "nosuch"), "nosuch"),
             ((tmp_path / "none.parquet", "--release", release), "none.parquet: no such results file"),
             ((corrupt, "--release", release), f"{corrupt}: not a results file"),
             ((honest_results, "--release", release, "--weights", "v9"), "no weights version v9"),
             ((honest_results, "--release", release, "--submission", "honset"),
              "no rows for submission 'honset' (did you mean honest?)")]
    for args, expected in cases:
        done = hotshape("score", *args)
        assert done.returncode == 2 and expected in one_error(done, "score"), (args, done.stderr)
        assert done.stdout == ""
        if "results file" in expected:  # the whole of stderr: the release's verification line came first before
            assert done.stderr.count("\n") == 1, done.stderr


def test_score_prints_the_operator_table_and_a_cpu_run_is_not_measured(release, honest_results):
    done = hotshape("score", honest_results, "--release", release)
    assert done.returncode == 0, done.stderr
    assert "S_agg not measured" in done.stdout
    rms = next(x for x in done.stdout.splitlines() if x.split()[:1] == ["rms_norm"])
    n = sum(r["operator"] == "rms_norm" for r in read_results(honest_results).to_pylist())
    assert rms.split()[2:4] == ["not", "measured"] and rms.split()[5:8] == [str(n), "0", "0"]
    (s,) = json.loads(hotshape("score", honest_results, "--release", release, "--json").stdout)["scores"]
    assert s["S_agg"] is None and s["operators"]["rms_norm"]["S_op"] is None


def timed_copy(results: Path, out: Path, t_measured_s: float) -> Path:
    """The rows re-signed as if timed on an H200 and their run sealed (what a GPU run would have written)."""
    from kernels_eval.results_seal import run_ident, sealed_document, with_seals

    key = host_key(create=False)
    rows = [sign_row({**r, "hardware": "H200", "device": "cuda", "performance_measured": True,
                      "t_measured_s": t_measured_s}, key) for r in read_results(results).to_pylist()]
    table = pa.Table.from_pylist(rows, schema=RESULTS)
    pq.write_table(with_seals(table, sealed_document({}, rows, {run_ident(r) for r in rows}, key)), out)
    return out


def test_score_report_is_self_contained_html_with_both_plots(release, honest_results, tmp_path):
    # 10 ms: above every one of these problems' H200 roofline (a time under it is refused, kernels_eval/physics.py)
    timed = timed_copy(honest_results, tmp_path / "timed.parquet", 1e-2)
    report = tmp_path / "out" / "report.html"
    done = hotshape("score", timed, "--release", release, "--report", report, "--json")
    assert done.returncode == 0, done.stderr
    (s,) = json.loads(done.stdout)["scores"]
    assert s["S_agg"] == pytest.approx(sum(r["contribution"] or 0 for r in s["operators"].values()))
    assert s["operators"]["rms_norm"]["median_roofline_fraction"] > 0
    page = report.read_text()
    assert page.count('src="data:image/svg+xml;base64,') == 2  # contribution per operator, roofline per problem
    assert not re.search(r"(src|href)=\"(?!data:)", page) and "<table>" in page


def test_leaderboard_ranks_honest_above_a_fallback(release, honest_results, fallback_results, tmp_path):
    fallback, _ = fallback_results
    html = tmp_path / "board.html"
    done = hotshape("leaderboard", fallback, honest_results, "--release", release, "--json", "--html", html)
    assert done.returncode == 0, done.stderr
    board = json.loads(done.stdout)["leaderboard"]
    assert [(e["rank"], e["submission"]) for e in board] == [(1, "honest"), (2, "torch_fallback")]
    assert all(e["S_agg"] is None for e in board)  # CPU: ranked by the weight correct and native, never 0
    assert board[0]["rates"]["native"]["weighted"] > 0 == board[1]["rates"]["native"]["weighted"]
    assert "torch_fallback" in html.read_text() and "S_op per operator" in html.read_text()
    text = hotshape("leaderboard", honest_results, fallback, honest_results, "--release", release)
    assert text.returncode == 0 and text.stdout.splitlines()[1].split()[:3] == ["1", "honest@cpu", "not"]
    done = hotshape("leaderboard", honest_results, tmp_path / "none.parquet", "--release", release)
    assert done.returncode == 2 and "none.parquet: no such results file" in one_error(done, "leaderboard")
    assert done.stderr.count("\n") == 1, done.stderr


def test_ingest_capture_takes_one_value_per_flag():
    from pipelines.cli import build_parser

    args = build_parser().parse_args(["ingest", "--capture", "C", "T", "--out", "D"])
    assert args.capture == ["C"] and args.traces == ["T"]
    args = build_parser().parse_args(["ingest", "T", "--capture", "C1", "--capture", "C2", "--out", "D"])
    assert args.capture == ["C1", "C2"]


def test_uncaught_errors_are_one_line_and_debug_shows_the_traceback(monkeypatch, capsys):
    import argparse

    from pipelines import cli

    def boom(args):
        raise RuntimeError("worker table\nbroken")

    def parser(argv=None):
        p = argparse.ArgumentParser(prog="hotshape")
        p.add_argument("--debug", action="store_true")
        p.add_subparsers(dest="command").add_parser("x").set_defaults(func=boom)
        return p

    monkeypatch.setattr(cli, "build_parser", parser)
    assert cli.main(["x"]) == 1
    err = capsys.readouterr().err
    assert err == "hotshape x: internal error RuntimeError: worker table broken (rerun with --debug for the traceback)\n"
    with pytest.raises(RuntimeError):
        cli.main(["--debug", "x"])
    assert cli.error_line(FileNotFoundError("r.parquet")) == ("r.parquet: no such file or directory", 2)
    assert cli.error_line(ValueError("f.yaml: bad")) == ("f.yaml: bad", 2)
