"""benchmarks/kernel_variants.py without a GPU: which catalogue problems it picks, its summary maths and shape
labels, and one whole run of the parent on CPU (Triton's interpreter) with the committed rms_norm file and a
variant of it that is wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from catalogue.operators import load_work
from tests.conftest import load_script

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "kernel_variants.py"
COMMITTED_RMS_NORM = REPO / "examples" / "submissions" / "triton_reference" / "rms_norm.py"


@pytest.fixture(scope="module")
def variants():
    return load_script(SCRIPT)


@pytest.fixture(scope="module")
def manifest(atrex_dir, tmp_path_factory) -> Path:
    """A manifest of real release rows: six rms_norm problems (its two smallest, its largest and three between,
    by elements) and four of reshape_and_cache (0 FLOPs: ordered by bytes)."""
    from release.atrex import import_atrex

    tmp = tmp_path_factory.mktemp("kernel_variants")
    import_atrex(atrex_dir, tmp / "release")
    rows = pq.read_table(tmp / "release" / "public" / "manifest.parquet").to_pylist()

    def elements(r: dict) -> int:
        kw = json.loads(r["input_kwargs"])
        return kw["token_count"] * kw["hidden_size"]

    rms = sorted((r for r in rows if r["operator"] == "rms_norm"), key=lambda r: (elements(r), r["problem_id"]))
    n = len(rms)
    chosen = [rms[i] for i in (n - 1, n // 2, 0, n // 3, 1, 2 * n // 3)]  # not in size order
    chosen += [r for r in rows if r["operator"] == "reshape_and_cache"][:4]
    path = tmp / "manifest.parquet"
    pq.write_table(pa.Table.from_pylist(chosen), path)
    return path


def _flops(op: str, p: dict) -> int:
    return load_work(op).flops(**p["init"], **p["inputs"])


def test_spread_takes_evenly_spaced_ranks_with_both_ends(variants):
    assert variants.spread(list(range(25)), 5) == [0, 6, 12, 18, 24]
    assert variants.spread(list(range(10)), 4) == [0, 3, 6, 9]
    assert variants.spread(list(range(6)), 1) == [5]
    assert variants.spread(list(range(3)), 7) == [0, 1, 2]
    for size in range(1, 30):
        for n in range(2, size + 1):
            got = variants.spread(list(range(size)), n)
            assert len(set(got)) == n and got[0] == 0 and got[-1] == size - 1 and got == sorted(got)


def test_pick_spreads_the_operator_problems_by_flops(variants, manifest):
    problems = variants.operator_problems("rms_norm", manifest)
    assert len(problems) == 6
    ranked = sorted(problems, key=lambda p: _flops("rms_norm", p))
    picked = variants.choose("rms_norm", problems, pick=3)
    assert [p["problem_id"] for p in picked] == [ranked[i]["problem_id"] for i in (0, 3, 5)]
    everything = variants.choose("rms_norm", problems)
    assert [_flops("rms_norm", p) for p in everything] == sorted(_flops("rms_norm", p) for p in problems)
    assert variants.choose("rms_norm", problems, pick=20) == everything


def test_pick_orders_by_bytes_when_no_problem_has_flops(variants, manifest):
    problems = variants.operator_problems("reshape_and_cache", manifest)
    work = load_work("reshape_and_cache")
    assert len(problems) == 4 and all(_flops("reshape_and_cache", p) == 0 for p in problems)
    picked = variants.choose("reshape_and_cache", problems, pick=2)
    sizes = sorted(work.bytes_read(**p["inputs"]) + work.bytes_written(**p["inputs"]) for p in problems)
    assert [work.bytes_read(**p["inputs"]) + work.bytes_written(**p["inputs"]) for p in picked] == [sizes[0],
                                                                                                     sizes[-1]]


def test_problems_keep_the_given_order(variants, manifest):
    problems = variants.operator_problems("rms_norm", manifest)
    ids = [problems[4]["problem_id"], problems[0]["problem_id"], problems[2]["problem_id"]]
    assert [p["problem_id"] for p in variants.choose("rms_norm", problems, ids)] == ids


def test_unknown_problem_ids_are_an_error_naming_them(variants, manifest, capsys):
    problems = variants.operator_problems("rms_norm", manifest)
    reshape_id = variants.operator_problems("reshape_and_cache", manifest)[0]["problem_id"]
    with pytest.raises(ValueError, match=rf"rms_norm has no problems \['pnope', '{reshape_id}'\]"):
        variants.choose("rms_norm", problems, [problems[0]["problem_id"], "pnope", reshape_id])
    with pytest.raises(SystemExit) as exc:
        variants.main(["--op", "rms_norm", "--manifest", str(manifest), "--problems", "pnope", "--dry-run"])
    assert exc.value.code == 2 and "rms_norm has no problems ['pnope']" in capsys.readouterr().err


def test_dry_run_prints_the_problems_without_importing_torch(manifest):
    code = ("import runpy, sys\n"
            f"sys.argv = [{str(SCRIPT)!r}, '--op', 'rms_norm', '--pick', '3', '--manifest', {str(manifest)!r},"
            " '--dry-run']\n"
            "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
            "print('torch imported:', 'torch' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "rms_norm: 3 of 6 problems; roofline on H200"
    assert len([ln for ln in lines if ln.startswith("p") and "token_count=" in ln]) == 3
    assert lines[-1] == "torch imported: False"


def test_shape_label_summarises_long_lists(variants):
    assert variants.shape_label({"num_seqs": 699, "seq_lens": [256] * 699, "head_size": 128}) == \
        "num_seqs=699 seq_lens=699 x 256 head_size=128"
    assert variants.shape_label({"seq_lens": [150, 5, 70, 3, 12]}) == "seq_lens=5 values, sum 240"
    assert variants.shape_label({"seq_lens": [7], "shape": [5, 2, 32], "eps": 1e-6}) == \
        "seq_lens=[7] shape=[5,2,32] eps=1e-06"


def _row(candidate: str, pid: str, status: str, t_us: float | None = None, fraction: float | None = None) -> dict:
    return {"candidate": candidate, "problem_id": pid, "status": status, "correct": status == "ok",
            "t_us": t_us, "fraction": fraction}


def test_summary_counts_failures_as_zero_and_compares_only_where_both_are_right(variants):
    rows = [_row("base", "p1", "ok", 10.0, 0.5), _row("base", "p2", "ok", 20.0, 0.25),
            _row("base", "p3", "ok", 40.0, 0.1), _row("base", "p4", "fail"),
            _row("tiled", "p1", "ok", 5.0, 1.0), _row("tiled", "p2", "ok", 10.0, 0.5),
            _row("tiled", "p3", "fail"), _row("tiled", "p4", "ok", 1.0, 0.9)]  # tiled has no row for p5
    s = variants.summarise(rows, ["base", "tiled"], ["p1", "p2", "p3", "p4", "p5"])
    # base: fractions 0.5, 0.25, 0.1, 0 (p4 failed), 0 (p5: no row)
    assert s["base"]["correct"] == 3 and s["base"]["median_fraction"] == 0.1
    assert s["base"]["geomean_speedup"] == 1.0 and s["base"]["speedups_over"] == 3
    # tiled: fractions 1.0, 0.5, 0, 0.9, 0; speedups only on p1 (x2) and p2 (x2): not p3 nor p4
    assert s["tiled"]["correct"] == 3 and s["tiled"]["median_fraction"] == 0.5
    assert s["tiled"]["geomean_speedup"] == pytest.approx(2.0) and s["tiled"]["speedups_over"] == 2
    assert variants.best(rows[:1] + rows[4:5], ["base", "tiled"]) == "tiled x2.00"
    assert variants.best([rows[3], rows[7]], ["base", "tiled"]) == "tiled"  # the first failed: no speedup
    assert variants.best([rows[2], rows[6]], ["base", "tiled"]) == "base x1.00"


def test_cpu_run_judges_and_times_each_candidate(variants, manifest, tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    problems = variants.by_size("rms_norm", variants.operator_problems("rms_norm", manifest))
    ids = [p["problem_id"] for p in problems[:2]]
    wrong = tmp_path / "rms_norm_wrong_eps.py"  # the committed kernel with eps off by 1: plausible, wrong
    source = COMMITTED_RMS_NORM.read_text()
    assert "self.eps = float(eps)" in source
    wrong.write_text(source.replace("self.eps = float(eps)", "self.eps = float(eps) + 1.0"))
    out = tmp_path / "variants.json"
    rc = variants.main(["--op", "rms_norm", "--manifest", str(manifest), "--problems", ",".join(ids),
                        "--candidate", f"committed={COMMITTED_RMS_NORM}", "--candidate", f"wrong_eps={wrong}",
                        "--device", "cpu", "--reps", "2", "--timeout", "300", "--out", str(out)])
    assert rc == 0
    result = json.loads(out.read_text())
    rows = {(r["candidate"], r["problem_id"]): r for r in result["rows"]}
    assert len(rows) == 4 and os.path.isabs(result["candidates"]["wrong_eps"])
    for pid in ids:
        ok = rows[("committed", pid)]
        assert ok["status"] == "ok" and ok["correct"] and ok["t_us"] > 0 and ok["fraction"] > 0, ok
        assert ok["max_err"] is not None and ok["max_err"] <= 2e-2
        bad = rows[("wrong_eps", pid)]
        assert bad["status"] == "fail" and not bad["correct"] and bad["t_us"] is None
        assert "beyond atol" in bad["error"]
    assert result["summary"]["committed"]["correct"] == 2 and result["summary"]["wrong_eps"]["correct"] == 0
    assert result["summary"]["wrong_eps"]["median_fraction"] == 0.0
    assert result["device"] == "cpu" and result["torch"] and result["triton"]
    printed = capsys.readouterr().out.splitlines()
    assert printed[-3].startswith("committed ") and "correct 2/2" in printed[-3]
    assert printed[-2].startswith("wrong_eps ") and "correct 0/2" in printed[-2]
    table = [ln for ln in printed if ln.startswith(tuple(ids))]  # progress lines are indented
    assert len(table) == 2 and all("FAIL" in ln and "committed x1.00" in ln for ln in table)
