"""Bootstrap intervals: each replicate is the weight formula on a resample of profiles per deployment."""

from __future__ import annotations

import warnings
from collections import defaultdict

import numpy as np
import polars as pl
import pytest

from conftest import CARD_HOURS, DIR_OWNER, write_fleet
from test_selection import not_memory
from weighting.fleet import load_fleet
from weighting.selection import Policy, select_hot
from weighting.uncertainty import bootstrap_replicates, operator_intervals, weight_intervals
from weighting.weights import fleet_weights

ACC = {"H200", "MI300X", "B200"}


@pytest.fixture(scope="module")
def setup(planted_fleet):
    root, fleet_yaml, traces, ost, mixes = planted_fleet
    fleet = load_fleet(fleet_yaml, root, accelerators=ACC)
    selected, _ = select_hot(fleet_weights(ost, traces, fleet), Policy(), is_benchmarkable=not_memory)
    return fleet, traces, ost, mixes, selected


def replicate_by_loops(traces, ost, mixes, selected, draws: dict) -> dict:
    """Weights of the selected problems when deployment d's profiles are `draws[d]` (with repeats)."""
    total = dict(zip(traces["trace_id"], traces["gpu_ns"]))
    rows = defaultdict(list)
    for r in ost.iter_rows(named=True):
        rows[r["trace_id"]].append(r)
    keep = set(zip(selected["operator"], selected["shape"]))
    fleet = defaultdict(float)
    for dep, ids in draws.items():
        share = defaultdict(float)
        for tid in ids:
            for r in rows[tid]:
                share[(r["operator"], r["shape"], r["phase"])] += r["gpu_ns"] / total[tid] / len(ids)
        mix = mixes.get(dep) or {}
        per_phase = defaultdict(float)
        for k, v in share.items():
            per_phase[k[2]] += v
        # named phases that have time in this resample share their pooled time by the mix
        use = [p for p in mix if per_phase[p] > 0]
        pool, mass = sum(per_phase[p] for p in use), sum(mix[p] for p in use)
        for k, v in share.items():
            if k[2] in use and mass > 0:
                v = v * (mix[k[2]] / mass) * pool / per_phase[k[2]]
            if k[:2] in keep:
                fleet[k[:2]] += CARD_HOURS[dep] * v
    z = sum(fleet.values())
    return {k: v / z for k, v in fleet.items()}


def test_replicates_are_the_formula_on_resampled_profiles(setup):
    fleet, traces, ost, mixes, selected = setup
    reps = bootstrap_replicates(ost, traces, fleet, selected, n_boot=3, seed=11)
    # Replay the documented draw: deployments in id order, one multinomial of n_boot rows each.
    rng = np.random.default_rng(11)
    by_dep = defaultdict(list)
    for tid, path in sorted(zip(traces["trace_id"], traces["path"])):
        by_dep[DIR_OWNER[path.split("/")[0]]].append(tid)
    counts = {d: rng.multinomial(len(by_dep[d]), [1 / len(by_dep[d])] * len(by_dep[d]), size=3) for d in sorted(by_dep)}
    for b in range(3):
        draws = {d: [t for t, c in zip(by_dep[d], counts[d][b]) for _ in range(c)] for d in by_dep}
        want = replicate_by_loops(traces, ost, mixes, selected, draws)
        for j, key in enumerate(zip(selected["operator"], selected["shape"])):
            assert reps[b, j] == pytest.approx(want.get(key, 0.0), rel=1e-9, abs=1e-15)
        assert reps[b].sum() == pytest.approx(1.0, abs=1e-12)


def test_intervals_are_seeded_and_bracket_support(setup):
    fleet, traces, ost, _, selected = setup
    a = weight_intervals(ost, traces, fleet, selected, n_boot=200, seed=3)
    b = weight_intervals(ost, traces, fleet, selected, n_boot=200, seed=3)
    c = weight_intervals(ost, traces, fleet, selected, n_boot=200, seed=4)
    assert a.equals(b) and not a.equals(c)
    assert (a["weight_lo"] <= a["weight_hi"]).all() and (a["weight_se"] >= 0).all()
    assert a["weight_hi"].max() > a["weight_lo"].min()
    # support: distinct profiles / deployments with time in the problem, counted by loops
    profs, deps = defaultdict(set), defaultdict(set)
    owner = {t: DIR_OWNER[p.split("/")[0]] for t, p in zip(traces["trace_id"], traces["path"])}
    for r in ost.filter(pl.col("gpu_ns") > 0).iter_rows(named=True):
        profs[(r["operator"], r["shape"])].add(r["trace_id"])
        deps[(r["operator"], r["shape"])].add(owner[r["trace_id"]])
    for r in a.iter_rows(named=True):
        key = (r["operator"], r["shape"])
        assert (r["n_profiles"], r["n_deployments"]) == (len(profs[key]), len(deps[key]))
    ops = operator_intervals(ost, traces, fleet, selected, n_boot=200, seed=3)
    assert ops["weight"].sum() == pytest.approx(1.0, abs=1e-12)
    assert (ops["weight_lo"] <= ops["weight_hi"]).all()


def test_one_profile_per_deployment_has_no_spread(planted_fleet, tmp_path):
    root, _, traces, ost, _ = planted_fleet
    deployments = [
        {"id": "chat-sglang", "accelerator": "H200", "card_hours": 1000, "traces": ["sglang_decode/part0.json.gz"]},
        {"id": "train-misc", "accelerator": "B200", "card_hours": 250, "traces": ["alexnet/part0.json.gz"]},
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fleet = load_fleet(write_fleet(tmp_path / "one.yaml", deployments), root, accelerators=ACC)
        selected, _ = select_hot(fleet_weights(ost, traces, fleet), Policy(), is_benchmarkable=not_memory)
        out = weight_intervals(ost, traces, fleet, selected, n_boot=50, seed=0)
    assert out["weight_lo"].to_list() == pytest.approx(out["weight"].to_list(), rel=1e-12)
    assert out["weight_hi"].to_list() == pytest.approx(out["weight"].to_list(), rel=1e-12)
    used = set(traces.filter(pl.col("path").is_in(["sglang_decode/part0.json.gz", "alexnet/part0.json.gz"]))["trace_id"])
    for r in out.iter_rows(named=True):
        rows = ost.filter((pl.col("operator") == r["operator"]) & (pl.col("shape") == r["shape"]) & (pl.col("gpu_ns") > 0))
        n = len(set(rows["trace_id"]) & used)
        assert r["n_profiles"] == n and r["n_deployments"] == n  # one profile per deployment
