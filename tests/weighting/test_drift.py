"""Drift metrics on a constructed case and between two refreshes of the planted fleet."""

from __future__ import annotations

import math
import warnings

import numpy as np
import polars as pl
import pytest
import yaml

from test_selection import not_memory
from weighting.drift import compare, js_divergence, spearman, total_variation
from weighting.fleet import load_fleet
from weighting.selection import Policy, select_hot
from weighting.weights import fleet_weights

ACC = {"H200", "MI300X", "B200"}


def weights(items: dict, ops: dict) -> pl.DataFrame:
    return pl.DataFrame({"problem_id": list(items), "operator": [ops[k] for k in items], "weight": list(items.values())})


OPS = {"a": "gemm", "b": "gemm", "c": "norm", "d": "attn", "e": "attn", "f": "norm"}


def test_constructed_case():
    old = {"a": 0.30, "b": 0.25, "c": 0.20, "d": 0.15, "e": 0.10}
    new = {"a": 0.25, "b": 0.30, "c": 0.20, "d": 0.05, "f": 0.20}
    r = compare(weights(old, OPS), weights(new, OPS))
    keys = sorted(set(old) | set(new))
    p = [old.get(k, 0.0) for k in keys]
    q = [new.get(k, 0.0) for k in keys]
    assert r.total_variation == pytest.approx(0.5 * sum(abs(x - y) for x, y in zip(p, q)))
    m = [(x + y) / 2 for x, y in zip(p, q)]
    js = 0.5 * sum(x * math.log2(x / z) for x, z in zip(p, m) if x) + 0.5 * sum(y * math.log2(y / z) for y, z in zip(q, m) if y)
    assert r.js_divergence == pytest.approx(js, rel=1e-12)
    assert r.newly_hot == ["f"] and r.newly_cold == ["e"]
    # kept a,b,c,d: old ranks 4,3,2,1 ; new ranks 3,4,2,1 → Σd² = 2
    assert r.spearman == pytest.approx(1 - 6 * 2 / (4 * 15))
    deltas = dict(zip(r.problems["problem_id"], r.problems["delta"]))
    assert deltas == pytest.approx({k: new.get(k, 0.0) - old.get(k, 0.0) for k in keys})
    assert r.problems["problem_id"][0] in ("e", "f", "d")  # biggest movers first (|Δ| = 0.2, 0.1)
    ops = {o: (a, b) for o, a, b in r.operators.select("operator", "weight_old", "weight_new").iter_rows()}
    assert ops == {"gemm": pytest.approx((0.55, 0.55)), "norm": pytest.approx((0.20, 0.40)), "attn": pytest.approx((0.25, 0.05))}
    assert r.operator_total_variation == pytest.approx(0.2)
    d = r.to_dict()
    assert d["newly_hot"] == ["f"] and d["n_kept"] == 4


def test_unnormalised_weights_are_normalised_and_sums_reported():
    old = {"a": 0.6, "b": 0.4948, "c": 0.0}  # sums to 1.0948 like Atrex-Bench's published scores
    r = compare(weights(old, OPS), weights({"a": 0.6, "b": 0.4}, OPS))
    assert r.sum_old == pytest.approx(1.0948)
    assert r.problems["weight_old"].sum() == pytest.approx(1.0)
    assert "c" not in r.problems["problem_id"].to_list()  # zero on both sides is no problem at all


def test_identical_and_disjoint_sets():
    a = weights({"a": 0.5, "b": 0.5}, OPS)
    same = compare(a, a)
    assert same.js_divergence == 0.0 and same.total_variation == 0.0
    assert same.spearman is None  # both sides constant: no ranking to correlate
    far = compare(a, weights({"c": 0.5, "d": 0.5}, OPS))
    assert far.js_divergence == pytest.approx(1.0) and far.total_variation == pytest.approx(1.0)


def test_spearman_with_ties_is_pearson_of_average_ranks():
    a = np.array([1.0, 2.0, 2.0, 3.0, 5.0, 5.0, 5.0])
    b = np.array([2.0, 1.0, 3.0, 3.0, 4.0, 6.0, 5.0])
    ra = np.array([1, 2.5, 2.5, 4, 6, 6, 6])
    rb = np.array([2, 1, 3.5, 3.5, 5, 7, 6])
    assert spearman(a, b) == pytest.approx(np.corrcoef(ra, rb)[0, 1], rel=1e-12)
    assert spearman([1.0], [2.0]) is None


def test_divergences_are_symmetric_and_bounded():
    rng = np.random.default_rng(1)
    p, q = rng.random(30), rng.random(30)
    assert js_divergence(p, q) == pytest.approx(js_divergence(q, p))
    assert 0 < js_divergence(p, q) < total_variation(p, q) * 2 <= 2


def test_two_refreshes_of_the_planted_fleet(planted_fleet, tmp_path):
    root, fleet_yaml, traces, ost, _ = planted_fleet
    doc = yaml.safe_load(fleet_yaml.read_text())
    # The first refresh had not yet seen the B200 eager profiles (nor its mixed phase).
    first = [dict(d) for d in doc["deployments"]]
    first[1] = {**first[1], "traces": ["vllm_decode/*.json.gz"], "phase_mix": None}
    first[1].pop("phase_mix")
    (tmp_path / "old.yaml").write_text(yaml.safe_dump({"deployments": first}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fleet_old = load_fleet(tmp_path / "old.yaml", root, accelerators=ACC)
        policy = Policy(coverage_target=0.8, shape_cap=4, min_operator_share=0.005)
        old, _ = select_hot(fleet_weights(ost, traces, fleet_old), policy, is_benchmarkable=not_memory)
    fleet_new = load_fleet(fleet_yaml, root, accelerators=ACC)
    new, _ = select_hot(fleet_weights(ost, traces, fleet_new), policy, is_benchmarkable=not_memory)
    r = compare(old, new)

    def key(f):
        return {f"{o} {s}": w for o, s, w in f.select("operator", "shape", "weight").iter_rows()}

    o, n = key(old), key(new)
    assert set(r.newly_hot) == set(n) - set(o) and r.newly_hot
    assert set(r.newly_cold) == set(o) - set(n)
    b200_ops = set(ost.filter(pl.col("trace_id").is_in(traces.filter(pl.col("path").str.starts_with("b200_eager/"))["trace_id"].to_list()))["operator"])
    assert {p.split(" ")[0] for p in r.newly_hot} <= b200_ops
    allk = sorted(set(o) | set(n))
    assert r.total_variation == pytest.approx(0.5 * sum(abs(o.get(k, 0) - n.get(k, 0)) for k in allk), rel=1e-12)
    assert compare(old, new).problems.equals(r.problems)


def test_movements_beyond_the_new_intervals_are_marked():
    from weighting.drift import beyond_intervals

    old = pl.DataFrame({"problem_id": ["a", "b", "c"], "operator": ["x", "x", "y"], "weight": [0.5, 0.3, 0.2]})
    new = pl.DataFrame({"problem_id": ["a", "b", "c"], "operator": ["x", "x", "y"], "weight": [0.4, 0.31, 0.29]})
    report = compare(old, new)
    problems = pl.DataFrame({"problem_id": ["a", "b", "c"], "weight_lo": [0.35, 0.25, 0.1], "weight_hi": [0.45, 0.35, 0.3]})
    operators = pl.DataFrame({"operator": ["x", "y"], "weight_lo": [0.6, 0.15], "weight_hi": [0.75, 0.35]})
    marked = beyond_intervals(report.to_dict(), report, problems, operators)
    assert marked["beyond_interval"]["problems"] == ["a"]  # 0.5 outside [0.35, 0.45]; b and c inside theirs
    assert marked["beyond_interval"]["operators"] == ["x"]  # W_x 0.8 outside [0.6, 0.75]
    assert {m["problem_id"]: m["beyond_interval"] for m in marked["top_problem_movers"]} == {"a": True, "b": False, "c": False}
    assert {o["operator"]: o["beyond_interval"] for o in marked["operators"]} == {"x": True, "y": False}
