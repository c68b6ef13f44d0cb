"""Results nobody but the evaluator writes: rows journalled as judged (a SIGKILL keeps them, --resume does not
judge them again), writers that lose nothing, --out checked before the first problem, and `hotshape score`
refusing forged rows and taking t_roofline from the release. Real releases, real `hotshape` processes, CPU."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kernels_eval.results_key import host_key, row_verifies, sign_row
from kernels_eval.results_schema import RESULTS, read_results
from kernels_eval.results_store import journal_dir
from tests.conftest import REPO

HOTSHAPE = str(Path(sys.executable).with_name("hotshape"))
HONEST = REPO / "tests" / "adversarial" / "honest"
TWO_OPS = "rms_norm,silu_and_mul"  # rms_norm is judged first (operators run in name order)


def hotshape(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([HOTSHAPE, *map(str, args)], capture_output=True, text=True, timeout=300, **kw)


def make_release(atrex_dir: Path, out: Path, name: str | None = None) -> Path:
    done = hotshape("import-atrex", atrex_dir, "--out", out, *(["--name", name] if name else []))
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def release(atrex_dir, tmp_path_factory) -> Path:
    """The Atrex-Bench release, as `hotshape import-atrex` builds it."""
    return make_release(atrex_dir, tmp_path_factory.mktemp("release") / "atrex")


def evaluate(release: Path, out: Path, ops: str = "rms_norm", *extra) -> subprocess.CompletedProcess:
    return hotshape("eval", HONEST, "--release", release, "--device", "cpu", "--ops", ops, "--out", out, *extra)


def popen_eval(release: Path, out: Path, ops: str = TWO_OPS) -> subprocess.Popen:
    # its own session, so that the workers it leaves behind when killed can be ended with it
    return subprocess.Popen([HOTSHAPE, "eval", str(HONEST), "--release", str(release), "--device", "cpu",
                             "--ops", ops, "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def journal_rows(out: Path) -> list[dict]:
    rows = []
    for path in journal_dir(out).glob("*.jsonl"):
        for line in path.read_text().splitlines()[1:]:
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass  # a line torn by the kill
    return rows


def wait_for_rows(proc: subprocess.Popen, out: Path, timeout_s: float = 120) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rows = journal_rows(out)
        if rows:
            return rows
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    raise AssertionError("no row reached the journal")


def end_session(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()


@contextmanager
def tmpfs(path: Path, options: str):
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("hotshape ")]


def progress_lines(stderr: str, operator: str) -> list[str]:
    return [line for line in stderr.splitlines() if f" {operator} " in line]


def test_rows_survive_a_sigkill_and_resume_judges_only_the_rest(release, tmp_path):
    out = tmp_path / "results.parquet"
    proc = popen_eval(release, out)
    try:
        wait_for_rows(proc, out)
        proc.send_signal(signal.SIGKILL)  # the evaluator itself, as a hostile candidate would
        proc.wait(timeout=30)
    finally:
        end_session(proc)
    kept = journal_rows(out)
    assert kept and {r["operator"] for r in kept} == {"rms_norm"} and not out.exists()
    key = host_key(create=False)
    assert all(row_verifies(r, key) for r in kept)

    done = evaluate(release, out, TWO_OPS, "--resume", "--progress")  # a line per problem judged, on stderr
    assert done.returncode == 0, done.stderr
    judged_again = {line.split()[0] for line in progress_lines(done.stderr, "rms_norm")}
    assert not judged_again & {r["problem_id"] for r in kept}
    assert f"({len(kept)} judged before the cut, kept)" in done.stdout
    rows = read_results(out).to_pylist()
    assert {r["operator"] for r in rows} == {"rms_norm", "silu_and_mul"}
    assert len(rows) == len({r["problem_id"] for r in rows}) and len({r["run_id"] for r in rows}) == 1
    assert all(row_verifies(r, key) for r in rows)
    assert not journal_dir(out).exists()


WRITER = """
import sys
from kernels_eval.results_schema import RESULTS
from kernels_eval.results_store import merge_rows
name, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(n):
    row = {f.name: None for f in RESULTS}
    row.update(submission=name, release="r", run_id=f"{name}-{i}", run=i, problem_id=f"p{i}", operator="rms_norm",
               hardware="cpu", device="cpu", shape_kind="smoke", stage="done", fallbacks=[])
    merge_rows([row], path)
"""


def test_two_writers_into_one_results_file_lose_nothing(tmp_path):
    out, n = tmp_path / "results.parquet", 25
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, name, str(out), str(n)], cwd=REPO)
               for name in ("a", "b")]
    assert [w.wait(timeout=300) for w in writers] == [0, 0]
    rows = read_results(out).to_pylist()
    assert len(rows) == 2 * n and len({(r["submission"], r["run"]) for r in rows}) == 2 * n
    assert [p.name for p in tmp_path.iterdir() if ".tmp" in p.name] == []


def test_read_only_out_fails_before_the_first_problem(release, tmp_path):
    ro = tmp_path / "ro"
    if os.geteuid() == 0:  # root writes through mode bits: only a read-only mount stops it
        ctx = tmpfs(ro, "size=1m,ro")
    else:
        ro.mkdir()
        ro.chmod(0o555)
        ctx = None
    with ctx if ctx is not None else _nothing():
        began = time.monotonic()
        done = evaluate(release, ro / "results.parquet")
        assert done.returncode == 2
        (error,) = errors(done.stderr)
        assert str(ro) in error and "cannot write" in error
        assert not progress_lines(done.stderr, "rms_norm") and time.monotonic() - began < 30


@contextmanager
def _nothing():
    yield


def test_out_inside_a_release_is_refused(release):
    done = evaluate(release, release / "public" / "results.parquet")
    assert done.returncode == 2 and "inside the release" in done.stderr
    assert not (release / "public" / "results.parquet.journal").exists()


def test_tiny_tmpfs_is_refused_before_the_first_problem(release, tmp_path):
    with tmpfs(tmp_path / "tiny", "size=64k") as tiny:
        done = evaluate(release, tiny / "results.parquet")
    assert done.returncode == 2 and f"{tiny}: " in done.stderr and "MiB free" in done.stderr
    assert not progress_lines(done.stderr, "rms_norm")


def test_disk_full_mid_run_names_the_file_and_keeps_the_rows_in_the_journal(release, tmp_path):
    with tmpfs(tmp_path / "small", "size=8m") as small:
        out = small / "results.parquet"
        proc = popen_eval(release, out)
        try:
            wait_for_rows(proc, out)
            try:  # the disk fills up while the run goes on (the run's own files may have filled it already)
                with open(small / "filler", "wb") as fh:
                    while True:
                        fh.write(b"\0" * 65536)
                        fh.flush()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
            _, stderr = proc.communicate(timeout=300)
        finally:
            end_session(proc)
        assert proc.returncode == 2, stderr
        last = stderr.strip().splitlines()[-1]
        assert last.startswith("hotshape eval: ") and "No space left on device" in last
        assert str(journal_dir(out)) in last and "--resume" in last
        kept = journal_rows(out)
        assert kept and not out.exists()

        (small / "filler").unlink(missing_ok=True)
        done = evaluate(release, out, TWO_OPS, "--resume")
        assert done.returncode == 0, done.stderr
        rows = read_results(out).to_pylist()
        assert {r["problem_id"] for r in kept} <= {r["problem_id"] for r in rows}
        assert {r["operator"] for r in rows} == {"rms_norm", "silu_and_mul"}


@pytest.fixture(scope="module")
def honest_results(release, tmp_path_factory) -> Path:
    """Results of the honest rms_norm on CPU, signed by the test session's key."""
    out = tmp_path_factory.mktemp("honest") / "results.parquet"
    env = {**os.environ, "HOTSHAPE_KEY_DIR": str(tmp_path_factory.getbasetemp() / "results-key")}
    done = hotshape("eval", HONEST, "--release", release, "--device", "cpu", "--ops", "rms_norm", "--out", out,
                    env=env)
    assert done.returncode == 0, done.stderr
    return out


def rewrite(src: Path, dst: Path, edit, seal_with=None) -> Path:
    """`src`'s rows edited into `dst`; with `seal_with` (the host key) its runs sealed anew, as the evaluator's
    merge seals what it writes (a rewrite without the key leaves them unsealed)."""
    from kernels_eval.results_seal import run_ident, sealed_document, with_seals

    rows = edit(read_results(src).to_pylist())
    table = pa.Table.from_pylist(rows, schema=RESULTS)
    if seal_with is not None:
        table = with_seals(table, sealed_document({}, rows, {run_ident(r) for r in rows}, seal_with))
    pq.write_table(table, dst)
    return dst


def score(results: Path, release: Path, *extra) -> subprocess.CompletedProcess:
    return hotshape("score", results, "--release", release, *extra)


def test_honest_cpu_results_score_as_not_measured(honest_results, release):
    done = score(honest_results, release)
    assert done.returncode == 0, done.stderr
    n = read_results(honest_results).num_rows
    assert "S_agg not measured" in done.stdout and "0.0000" not in done.stdout.split("S_agg")[1].split()[0]
    (s,) = json.loads(score(honest_results, release, "--json").stdout)["scores"]
    assert s["S_agg"] is None and s["evaluated"] == n and s["rates"]["native"]["unweighted"] > 0


def test_score_says_how_many_rows_ran_unsandboxed(honest_results, release, tmp_path):
    key = host_key(create=False)
    mixed = rewrite(honest_results, tmp_path / "mixed.parquet",  # as `eval --no-sandbox` would sign them
                    lambda rows: [sign_row({**r, "sandboxed": i % 2 == 0}, key) for i, r in enumerate(rows)], key)
    done = score(mixed, release)
    assert done.returncode == 0, done.stderr
    assert f"{read_results(mixed).num_rows // 2} rows ran unsandboxed" in done.stdout


def _edit_one(column, value):
    def edit(rows):
        rows[0][column] = value
        return rows
    return edit


@pytest.mark.parametrize("forgery", [
    _edit_one("t_measured_s", 1e-12),
    _edit_one("t_roofline_s", 1e9),
    _edit_one("native", False),
    lambda rows: rows + [{**rows[0], "problem_id": "p" + "0" * 16}],  # a row appended by hand
    lambda rows: rows + [dict(rows[0])],  # a genuine row twice: it would move the median over runs
])
def test_forged_rows_are_refused_or_excluded(honest_results, release, tmp_path, forgery):
    forged = rewrite(honest_results, tmp_path / "forged.parquet", forgery)
    total = read_results(forged).num_rows
    done = score(forged, release)
    assert done.returncode == 2 and done.stdout == ""
    (error,) = errors(done.stderr)
    assert str(forged) in error and f"1 of {total} rows fail signature verification" in error
    excluded = score(forged, release, "--exclude-unverified")
    assert excluded.returncode == 0 and f"1 of {total} rows excluded: signature not verified" in excluded.stdout


def test_rows_of_another_release_are_refused(honest_results, release, atrex_dir, tmp_path):
    other = make_release(atrex_dir, tmp_path / "other", name="other-bench")
    done = score(honest_results, other)
    assert done.returncode == 2 and "made against another release than other-bench" in done.stderr
    key = host_key(create=False)
    elsewhere = rewrite(honest_results, tmp_path / "elsewhere.parquet",  # a release of the same name, other problems
                        lambda rows: [sign_row({**r, "release_digest": "0" * 64, "manifest_sha256": "1" * 64}, key)
                                      for r in rows], key)
    done = score(elsewhere, release)
    assert done.returncode == 2 and "made against another release" in done.stderr
    assert score(elsewhere, release, "--exclude-unverified").returncode == 0
    # made before a refresh: another release.json digest, the same manifest: scored, and said so
    refreshed = rewrite(honest_results, tmp_path / "refreshed.parquet",
                        lambda rows: [sign_row({**r, "release_digest": "0" * 64}, key) for r in rows], key)
    done = score(refreshed, release)
    assert done.returncode == 0 and "rows were made before the release's last refresh" in done.stdout


def test_unsigned_rows_of_an_old_results_file_are_refused(honest_results, release, tmp_path):
    old = tmp_path / "old.parquet"
    table = pq.read_table(honest_results)
    pq.write_table(table.drop_columns(["key_id", "signature", "release_digest", "manifest_sha256", "sandboxed",
                                       "t_event_s"]), old)
    assert read_results(old).column("signature").null_count == table.num_rows  # still readable
    done = score(old, release)
    assert done.returncode == 2 and f"{table.num_rows} of {table.num_rows} rows fail" in done.stderr


def test_score_takes_t_roofline_from_the_release(honest_results, release, tmp_path):
    import polars as pl

    sealed = pl.read_parquet(release / "sealed" / "roofline.parquet").filter(pl.col("hardware") == "H200")
    roof = dict(sealed.select("problem_id", "t_roofline_s").iter_rows())
    key = host_key(create=False)

    def timed_on_h200(rows, forged_roofline):
        # signed with this host's key: the evaluator's own rows, as a GPU run would make them
        return [sign_row({**r, "hardware": "H200", "device": "cuda", "performance_measured": True,
                          "t_measured_s": 2 * roof[r["problem_id"]], "t_roofline_s": forged_roofline}, key)
                for r in rows]

    honest = rewrite(honest_results, tmp_path / "h.parquet", lambda rows: timed_on_h200(rows, None), key)
    forged = rewrite(honest_results, tmp_path / "f.parquet", lambda rows: timed_on_h200(rows, 1e9), key)
    scores = [json.loads(score(path, release, "--json").stdout)["scores"] for path in (honest, forged)]
    assert scores[0] == scores[1]
    (s,) = scores[0]
    assert s["S_op"]["rms_norm"] == pytest.approx(0.5)  # T_roofline / T_measured with the release's roofline
    assert s["S_agg"] == pytest.approx(0.5 * s["W_op"]["rms_norm"])


def keep_seals(src: Path, dst: Path, edit) -> Path:
    """`src`'s rows edited into `dst` with its seal metadata carried over unchanged: what an editor without the
    key can do."""
    table = pq.read_table(src)
    rows = edit(read_results(src).to_pylist())
    pq.write_table(pa.Table.from_pylist(rows, schema=RESULTS).replace_schema_metadata(table.schema.metadata), dst)
    return dst


def test_rows_deleted_from_a_sealed_run_are_refused(honest_results, release, tmp_path):
    rows = read_results(honest_results).to_pylist()
    assert len(rows) > 1 and all(r["run_sealed"] for r in rows)
    cut = keep_seals(honest_results, tmp_path / "cut.parquet", lambda rows: rows[1:])  # a failing row gone
    done = score(cut, release)
    assert done.returncode == 2 and done.stdout == ""
    (error,) = errors(done.stderr)
    assert str(cut) in error and f"{len(rows) - 1} rows where its seal signed {len(rows)}" in error
    excluded = score(cut, release, "--exclude-unverified")
    assert excluded.returncode == 0 and "their run's seal fails" in excluded.stdout
    stripped = rewrite(honest_results, tmp_path / "stripped.parquet", lambda rows: rows)  # the seals dropped
    done = score(stripped, release)
    assert done.returncode == 2 and "holds no seal" in done.stderr


def test_a_deleted_run_is_refused(honest_results, release, tmp_path):
    key = host_key(create=False)

    def two_runs(rows):  # a second run of the same submission, as the evaluator signs and seals it
        return rows + [sign_row({**r, "run": 1, "run_id": r["run_id"] + "-b"}, key) for r in rows]

    both = rewrite(honest_results, tmp_path / "both.parquet", two_runs, key)
    assert score(both, release).returncode == 0
    first = keep_seals(both, tmp_path / "first.parquet", lambda rows: [r for r in rows if r["run"] == 0])
    done = score(first, release)
    assert done.returncode == 2 and "none in the file (a run deleted)" in done.stderr, done.stderr
    from kernels_eval.results_seal import SEALS_KEY

    doc = json.loads(pq.read_schema(first).metadata[SEALS_KEY])
    doc["runs"] = [s for s in doc["runs"] if s["run"] == 0]  # its seal removed with it
    table = pq.read_table(first)
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, SEALS_KEY: json.dumps(doc).encode()}),
                   tmp_path / "resealed.parquet")
    done = score(tmp_path / "resealed.parquet", release)
    assert done.returncode == 2 and "the file's seal over its runs does not verify" in done.stderr, done.stderr


def test_a_time_below_the_release_roofline_is_refused_by_score(honest_results, release, tmp_path):
    import polars as pl

    sealed = pl.read_parquet(release / "sealed" / "roofline.parquet").filter(pl.col("hardware") == "H200")
    roof = dict(sealed.select("problem_id", "t_roofline_s").iter_rows())
    key = host_key(create=False)
    fast = rewrite(honest_results, tmp_path / "fast.parquet", lambda rows: [  # signed: a row from another evaluator
        sign_row({**r, "hardware": "H200", "device": "cuda", "performance_measured": True, "stage": "done",
                  "t_measured_s": roof[r["problem_id"]] / 1.53, "t_roofline_s": None}, key) for r in rows], key)
    done = score(fast, release)
    assert done.returncode == 2 and done.stdout == ""
    (error,) = errors(done.stderr)
    assert "below their problem's roofline" in error and "roofline fraction 1.530 > 1" in error
    assert "µs is below the problem's roofline of" in error
    excluded = score(fast, release, "--exclude-unverified", "--json")
    assert excluded.returncode == 0
    doc = json.loads(excluded.stdout)
    assert doc["excluded_below_roofline"] == read_results(fast).num_rows
