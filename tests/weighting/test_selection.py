"""Hot-shape selection: coverage target, shape cap, minimum share, benchmarkable only; weights sum to 1."""

from __future__ import annotations

import math
from collections import defaultdict

import polars as pl
import pytest

from weighting.fleet import load_fleet
from weighting.selection import Policy, load_policy, select_hot
from weighting.weights import fleet_weights

ACC = {"H200", "MI300X", "B200"}


def not_memory(op: str) -> bool:
    """The evaluator's registry when installed; else kernel-name stand-in operators minus data movement."""
    try:
        from catalogue.registry import is_benchmarkable
    except ImportError:
        return not any(w in op.lower() for w in ("memcpy", "memset", "nccl", "communication", "other"))
    return is_benchmarkable(op)


def expected_selection(fw: pl.DataFrame, policy: Policy, benchmarkable) -> dict:
    """(operator, shape) → weight by the policy, computed with plain loops."""
    per = defaultdict(float)
    share = defaultdict(float)
    for r in fw.iter_rows(named=True):
        per[(r["operator"], r["shape"])] += r["fleet_card_hours"]
        share[r["operator"]] += r["fleet_share"]
    ops = defaultdict(list)
    for (op, shape), t in per.items():
        if t > 0:
            ops[op].append((t, shape))
    chosen = {}
    for op, items in ops.items():
        if not benchmarkable(op) or share[op] < policy.min_operator_share:
            continue
        items.sort(key=lambda x: (-x[0], x[1]))
        total, acc = sum(t for t, _ in items), 0.0
        for i, (t, shape) in enumerate(items):
            if i >= policy.shape_cap or acc >= policy.coverage_target * total:
                break
            chosen[(op, shape)] = t
            acc += t
    z = sum(chosen.values())
    return {k: v / z for k, v in chosen.items()}


@pytest.mark.parametrize("policy", [Policy(), Policy(coverage_target=0.5, shape_cap=2, min_operator_share=0.01)])
def test_planted_selection_matches_the_policy(planted_fleet, policy):
    root, fleet_yaml, traces, ost, _ = planted_fleet
    fw = fleet_weights(ost, traces, load_fleet(fleet_yaml, root, accelerators=ACC))
    selected, report = select_hot(fw, policy, is_benchmarkable=not_memory)
    want = expected_selection(fw, policy, not_memory)
    got = {(r["operator"], r["shape"]): r["weight"] for r in selected.iter_rows(named=True)}
    assert set(got) == set(want)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-12)
    assert abs(math.fsum(selected["weight"].to_list()) - 1.0) <= 1e-12
    for phase in ("prefill", "decode", "mixed"):
        col = selected[f"weight_{phase}"].to_list()
        assert abs(math.fsum(col) - 1.0) <= 1e-12 or not any(col)
    assert report["n_problems"] == selected.height
    assert 0 < report["coverage_of_fleet"] <= report["coverage_of_operator_time"] <= 1
    assert report["coverage_of_fleet"] == pytest.approx(selected["fleet_share"].sum(), rel=1e-12)


def test_phase_weights_are_each_phase_normalised(planted_fleet):
    root, fleet_yaml, traces, ost, _ = planted_fleet
    fw = fleet_weights(ost, traces, load_fleet(fleet_yaml, root, accelerators=ACC))
    selected, _ = select_hot(fw, Policy(), is_benchmarkable=not_memory)
    keys = set(zip(selected["operator"], selected["shape"]))
    decode = defaultdict(float)
    for r in fw.filter(pl.col("phase") == "decode").iter_rows(named=True):
        if (r["operator"], r["shape"]) in keys:
            decode[(r["operator"], r["shape"])] += r["fleet_card_hours"]
    z = sum(decode.values())
    assert z > 0
    for r in selected.iter_rows(named=True):
        assert r["weight_decode"] == pytest.approx(decode.get((r["operator"], r["shape"]), 0.0) / z, rel=1e-12, abs=1e-15)


def toy(rows):
    """A fleet_weights frame from (operator, shape, phase, card_hours) with a fleet total of 100."""
    return pl.DataFrame(
        [{"operator": o, "shape": s, "phase": p, "fleet_card_hours": float(t), "fleet_share": t / 100.0,
          "n_profiles": 1, "n_deployments": 1} for o, s, p, t in rows]
    )


def test_cap_target_min_share_and_exclusions():
    rows = [("gemm", f"s{i}", "decode", 10 - i) for i in range(6)]  # 10,9,...,5 → 45
    rows += [("norm", "a", "prefill", 8), ("norm", "a", "decode", 2), ("norm", "b", "unknown", 1)]
    rows += [("communication", "x", "decode", 30), ("tiny", "t", "decode", 0.2)]
    selected, report = select_hot(toy(rows), Policy(0.5, 2, 0.001), is_benchmarkable=lambda o: o != "communication")
    assert list(zip(selected["operator"], selected["shape"])) == [("gemm", "s0"), ("gemm", "s1"), ("norm", "a"), ("tiny", "t")]
    status = {o["operator"]: o for o in report["operators"]}
    assert status["communication"]["status"] == "not_benchmarkable"
    assert status["gemm"]["capped"] and status["gemm"]["shapes_selected"] == 2
    assert not status["norm"]["capped"]
    # norm "a" (10 of 11) crosses the 50% target on its own; phase time stays split inside it
    norm = selected.filter(pl.col("operator") == "norm").row(0, named=True)
    assert norm["weight"] == pytest.approx(10 / 29.2)
    assert norm["weight_prefill"] == pytest.approx(1.0)
    _, report2 = select_hot(toy(rows), Policy(0.5, 2, 0.01), is_benchmarkable=lambda o: o != "communication")
    assert {o["operator"]: o["status"] for o in report2["operators"]}["tiny"] == "below_min_share"


def test_policy_yaml_defaults_and_errors(tmp_path):
    assert load_policy() == Policy(coverage_target=0.9, shape_cap=32, min_operator_share=0.001, benchmarkable_only=True)
    bad = tmp_path / "p.yaml"
    bad.write_text("coverage_target: 1.5\n")
    with pytest.raises(ValueError, match=r"p.yaml: field 'coverage_target'"):
        load_policy(bad)
    bad.write_text("shape_limit: 3\n")
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['shape_limit'\]"):
        load_policy(bad)


def test_registry_decides_benchmarkable_by_default():
    from catalogue import registry

    rms = '{"eps":1e-06,"hidden_size":1024,"token_count":2500}'
    rows = [("communication", "x", "decode", 30), ("memcpy", "y", "decode", 30), ("rms_norm", rms, "decode", 40)]
    selected, report = select_hot(toy(rows), Policy())
    keep = {o for o in ("communication", "memcpy", "rms_norm") if registry.is_benchmarkable(o)}
    assert set(selected["operator"]) == keep
    assert "communication" not in keep and "memcpy" not in keep


def test_selection_is_deterministic(planted_fleet):
    root, fleet_yaml, traces, ost, _ = planted_fleet
    fw = fleet_weights(ost, traces, load_fleet(fleet_yaml, root, accelerators=ACC))
    a, ra = select_hot(fw, Policy(), is_benchmarkable=not_memory)
    b, rb = select_hot(fw.sample(fraction=1.0, shuffle=True, seed=3), Policy(), is_benchmarkable=not_memory)
    assert a.to_arrow().equals(b.to_arrow()) and ra == rb


def test_incomplete_shapes_are_left_out_and_reported():
    """A mined shape missing kwargs the operator needs cannot become a problem; its time is reported."""
    complete = '{"eps":1e-06,"hidden_size":1024,"token_count":2500}'
    incomplete = '{"hidden_size":1024}'  # a trace that recorded no token count
    rows = [("rms_norm", complete, 3.0), ("rms_norm", incomplete, 1.0)]
    fw = pl.DataFrame(
        [dict(operator=o, shape=s, phase="decode", fleet_card_hours=t, fleet_share=t / 4, n_profiles=1, n_deployments=1)
         for o, s, t in rows]
    )
    selected, report = select_hot(fw)
    assert selected["shape"].to_list() == [complete]
    (entry,) = [o for o in report["operators"] if o["operator"] == "rms_norm"]
    assert entry["incomplete_shape_share"] == pytest.approx(0.25)
    assert entry["coverage"] == pytest.approx(0.75)
