"""benchmarks/triton_scoreboard.py's target report: the library comparison read back from the committed H200
records (JSON and a log cut before its JSON), and each target judged met or missed by how much."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import yaml

from tests.conftest import load_script
from catalogue.registry import operator_names

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "triton_scoreboard.py"
LIBRARIES = REPO / "benchmarks" / "results" / "libraries"


@pytest.fixture(scope="module")
def board():
    return load_script(SCRIPT)


def test_library_log_lines_match_what_the_run_printed(board):
    log = LIBRARIES / "kernels_vs_libraries_gemm_attention.txt"
    rows = board.library_rows(log)
    # every result line the cut run printed (they end in yes/no and a max |diff|), each (op, shape) once
    printed = [line for line in log.read_text().splitlines() if line.split()[-2:-1] in (["yes"], ["no"])]
    assert len(rows) == len({(r["op"], r["shape"]) for r in rows}) == len(printed) > 0
    gemm = [r for r in rows if r["op"] == "gemm"]
    assert {r["shape"] for r in gemm} >= {"M4096 N4096 K4096", "M16384 N14336 K4096"}
    # the ratio column is library time / ours: recompute it from the two time columns of the same line
    for line in log.read_text().splitlines():
        parts = line.split()
        if parts and parts[0] == "gemm" and parts[-2] in ("yes", "no"):
            ours, lib, ratio = float(parts[4]), float(parts[6]), float(parts[8])
            assert abs(lib / ours - ratio) < 0.01
            assert ratio in {r["ratio"] for r in gemm}


def test_library_json_rows(board):
    path = LIBRARIES / "kernels_vs_libraries_unified_attention.json"
    raw = json.loads(path.read_text())["results"]
    rows = board.library_rows(path)
    assert [r["ratio"] for r in rows] == [r["ratio"] for r in raw]
    assert {r["op"] for r in rows} == {"unified_attention"}


def test_a_file_with_no_result_lines_is_an_error_naming_it(board, tmp_path):
    bad = tmp_path / "empty.txt"
    bad.write_text("-- gemm: 6 shapes\n")
    with pytest.raises(ValueError, match="empty.txt"):
        board.library_rows(bad)


def _table(rows):
    return pl.DataFrame(rows, schema={"problem_id": pl.String, "operator": pl.String, "stage": pl.String,
                                      "native_fraction": pl.Float64, "t_measured_s": pl.Float64,
                                      "t_roofline_s": pl.Float64, "t_roofline_measured_s": pl.Float64})


class _Release:
    manifest = pl.DataFrame({"problem_id": ["a1", "a2", "b1"]})


def test_targets_say_by_how_much_and_why(board, monkeypatch):
    monkeypatch.setattr(board, "problem_bounds", lambda manifest, hw: {"a1": "memory", "a2": "memory",
                                                                       "b1": "compute"})
    table = _table([
        # op a: memory-bound; its largest problem (a2, by roofline time) at 0.6 of the measured ceiling
        {"problem_id": "a1", "operator": "a", "stage": "done", "native_fraction": 1.0, "t_measured_s": 1e-5,
         "t_roofline_s": 1e-6, "t_roofline_measured_s": 1e-5},
        {"problem_id": "a2", "operator": "a", "stage": "done", "native_fraction": 1.0, "t_measured_s": 1e-3,
         "t_roofline_s": 5e-4, "t_roofline_measured_s": 6e-4},
        # op b: compute-bound, fell back to a library for part of its time
        {"problem_id": "b1", "operator": "b", "stage": "adoption", "native_fraction": 0.5, "t_measured_s": None,
         "t_roofline_s": 1e-3, "t_roofline_measured_s": None},
    ])
    s = {"S_agg": 0.3, "S_op": {"a": 0.5, "b": 0.0}, "W_op": {"a": 0.6, "b": 0.4}}
    libs = [[{"op": "gemm", "shape": "M1", "ratio": 0.75}, {"op": "gemm", "shape": "M2", "ratio": 0.65}]]
    why = {"a": "launch floor", "b": "library call"}
    text = "\n".join(board.target_lines(table, s, _Release(), "H200", libs, why))
    assert "0.3000 - missed by 0.2000" in text
    # what each operator leaves: W_op x (1 - S_op), the larger first, with its reason
    assert text.index("b                              0.4000") < text.index("a                              0.3000")
    assert "library call" in text and "launch floor" in text
    assert "adoption 100%: 2/3 problems native and correct - missed by 1 problems" in text
    assert "no operator at 0: lowest S_op b 0.0000 - missed: b: library call" in text
    assert "0 of 1 met" in text and "missed: a 0.600 (short by 0.250): launch floor" in text
    assert "gemm 0.65-0.75 over 2 shapes (missed)" in text


def test_every_reason_names_a_catalogue_operator():
    why = yaml.safe_load((REPO / "benchmarks" / "results" / "triton_reference" / "why.yaml").read_text())["why"]
    catalogue = set(operator_names())
    assert len(catalogue) >= 30 and why and set(why) <= catalogue, sorted(set(why) - catalogue)


def test_library_fraction_on_catalogue_problems(board):
    """The library's own roofline fraction is roofline / library time on the problems its JSON names, beside
    ours on the same and the operator's S_op; rows without a catalogue problem (synthetic GEMM shapes) are
    left out."""
    table = pl.DataFrame({"problem_id": ["u1", "u2", "u3"], "t_roofline_s": [1e-4, 3e-4, 1e-3]})
    rows = [{"op": "unified_attention", "problem_id": "u1", "library_s": 4e-4, "ours_s": 5e-4, "ratio": 0.8},
            {"op": "unified_attention", "problem_id": "u2", "library_s": 1e-3, "ours_s": 1e-3, "ratio": 1.0},
            {"op": "unified_attention", "problem_id": "u3", "library_s": 2e-3, "ours_s": 4e-3, "ratio": 0.5},
            {"op": "gemm", "problem_id": "gemm_8x8x8", "library_s": 1e-3, "ours_s": 1e-3, "ratio": 1.0}]
    s = {"S_agg": 0.25, "S_op": {"unified_attention": 0.2}, "W_op": {"unified_attention": 0.5}}
    (line,) = board.library_fraction_lines(table, rows, s)
    # library fractions 0.25, 0.30, 0.50 -> median 0.30; ours 0.20, 0.30, 0.25 -> median 0.25, max 0.30
    assert "on 3 catalogue problems: median 0.300, max 0.500 (ours on the same: median 0.250, max 0.300;" in line
    assert line.endswith("S_op over all unified_attention problems 0.200)")


def test_library_json_rows_name_their_catalogue_problems(board):
    rows = board.library_rows(LIBRARIES / "kernels_vs_libraries_unified_attention.json")
    assert all(r["problem_id"].startswith("p") and r["library_s"] > 0 and r["ours_s"] > 0 for r in rows)


def test_ceilings_on_the_floor_the_measured_ceilings_and_the_largest_gap(board):
    """Each operator's ceiling is the median over its problems of min(1, roofline / max(floor, bound)); the
    operator leaving the most is then held at its S_op, and the S_op it needs for 0.50 follows."""
    rows = pl.DataFrame({"problem_id": ["a1", "a2", "a3", "b1"], "operator": ["a", "a", "a", "b"],
                         "weight": [0.1, 0.1, 0.2, 0.6],
                         # a: rooflines 1 us (floor-bound: 1/4), 8 us, 20 us; its measured ceilings 8/7 of them
                         "t_roofline_s": [1e-6, 8e-6, 2e-5, 1e-3],
                         "t_roofline_measured_s": [8e-6 / 7, 64e-6 / 7, 160e-6 / 7, 2e-3]})
    s = {"S_op": {"a": 0.5, "b": 0.1}, "W_op": {"a": 0.4, "b": 0.6}}
    lines = board.ceiling_lines(rows, s, floor=4e-6)
    # datasheet: a's problems 0.25, 1, 1 -> median 1; b 1 -> 1.0 overall
    assert lines[0].endswith(": 1.0000")
    # measured: a 0.25, 0.875, 0.875 -> 0.875; b 0.5 -> 0.4 * 0.875 + 0.6 * 0.5 = 0.65
    assert lines[1].endswith(": 0.6500")
    # b leaves 0.6 * 0.9 = 0.54 (a 0.2): held at 0.1 -> 0.35 + 0.06 = 0.41; 0.50 needs b at (0.5 - 0.35) / 0.6
    assert lines[2] == ("  with b at its S_op 0.100 and every other operator at its measured ceiling: 0.4100; "
                        "S_agg 0.50 needs b's S_op at 0.250 or more")
