"""fleet_weights against the DESIGN.md formula, computed here independently with plain loops."""

from __future__ import annotations

import math
from collections import defaultdict

import polars as pl
import pytest

import planted
from conftest import CARD_HOURS, DIR_OWNER
from weighting.fleet import FleetError, FleetWarning, load_fleet
from weighting.weights import fleet_weights, phase_factors

ACC = {"H200", "MI300X", "B200"}


def expected_fleet(traces: pl.DataFrame, ost: pl.DataFrame, mixes: dict) -> dict:
    """fleet(o,s,φ) = Σ_d card_hours_d · share_d(o,s,φ), share_d = mean_p t_p/T_p, phase_mix applied."""
    total_of, dep_of = {}, {}
    for row in traces.iter_rows(named=True):
        total_of[row["trace_id"]] = row["gpu_ns"]
        dep_of[row["trace_id"]] = DIR_OWNER[row["path"].split("/")[0]]
    profiles = defaultdict(set)
    for tid, dep in dep_of.items():
        profiles[dep].add(tid)
    share = defaultdict(lambda: defaultdict(float))
    for row in ost.iter_rows(named=True):
        dep = dep_of[row["trace_id"]]
        key = (row["operator"], row["shape"], row["phase"])
        share[dep][key] += row["gpu_ns"] / total_of[row["trace_id"]] / len(profiles[dep])
    fleet = defaultdict(float)
    for dep, shares in share.items():
        mix = mixes.get(dep)
        if mix:
            labelled = sum(v for k, v in shares.items() if k[2] != "unknown")
            per_phase = defaultdict(float)
            for k, v in shares.items():
                per_phase[k[2]] += v
            shares = {k: (v * mix[k[2]] * labelled / per_phase[k[2]] if k[2] != "unknown" else v) for k, v in shares.items()}
        for k, v in shares.items():
            fleet[k] += CARD_HOURS[dep] * v
    return dict(fleet)


def test_planted_fleet_recovers_the_formula(planted_fleet):
    root, fleet_yaml, traces, ost, mixes = planted_fleet
    assert mixes, "the planted fleet must exercise phase_mix"
    fleet = load_fleet(fleet_yaml, root, accelerators=ACC)
    got = fleet_weights(ost, traces, fleet)
    want = expected_fleet(traces, ost, mixes)
    got_map = {(r["operator"], r["shape"], r["phase"]): r["fleet_card_hours"] for r in got.iter_rows(named=True)}
    assert set(got_map) == set(want)
    for key, value in want.items():
        assert got_map[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key
    total = sum(CARD_HOURS.values())
    assert got["fleet_share"].to_list() == pytest.approx([v / total for v in got["fleet_card_hours"]], rel=1e-12)


def test_planted_trace_times_are_the_files_gpu_time(planted_fleet):
    root, _, traces, _, _ = planted_fleet
    for row in traces.iter_rows(named=True):
        direct = planted.gpu_ns_of(root / row["path"])
        # ingest rounds each µs duration to whole ns: at most 1 ns per event apart
        assert abs(row["gpu_ns"] - direct) <= row["events"], row["path"]


def test_phase_mix_keeps_total_and_unknown_and_sets_the_split(planted_fleet):
    root, fleet_yaml, traces, ost, mixes = planted_fleet
    fleet = load_fleet(fleet_yaml, root, accelerators=ACC)
    with_mix = fleet_weights(ost, traces, fleet)
    bare_yaml = fleet_yaml.with_name("fleet_nomix.yaml")
    import yaml

    doc = yaml.safe_load(fleet_yaml.read_text())
    for d in doc["deployments"]:
        d.pop("phase_mix", None)
    bare_yaml.write_text(yaml.safe_dump(doc))
    without = fleet_weights(ost, traces, load_fleet(bare_yaml, root, accelerators=ACC))

    def by_phase(frame):
        return dict(frame.group_by("phase").agg(pl.col("fleet_card_hours").sum()).iter_rows())

    a, b = by_phase(with_mix), by_phase(without)
    assert math.fsum(a.values()) == pytest.approx(math.fsum(b.values()), rel=1e-12)
    assert a.get("unknown", 0.0) == pytest.approx(b.get("unknown", 0.0), rel=1e-12)
    assert any(abs(a[p] - b[p]) > 1e-6 * b[p] for p in a if p != "unknown")


def test_phase_factors_split_and_mismatches():
    f = phase_factors({"prefill": 0.2, "decode": 0.6}, {"prefill": 0.5, "decode": 0.5}, "x")
    assert 0.2 * f["prefill"] == pytest.approx(0.4) and 0.6 * f["decode"] == pytest.approx(0.4)
    # mixed time that the mix does not name stays as profiled; prefill and decode share the rest
    with pytest.warns(FleetWarning, match=r"dep.phase_mix has no entry for 'mixed'"):
        f = phase_factors({"prefill": 0.2, "decode": 0.2, "mixed": 0.1}, {"prefill": 0.25, "decode": 0.75}, "dep")
    assert (0.2 * f["prefill"], 0.2 * f["decode"], 0.1 * f["mixed"]) == pytest.approx((0.1, 0.3, 0.1))
    # a named phase with no time cannot be scaled up: the mix is renormalised over the phases that have time
    with pytest.warns(FleetWarning, match=r"dep.phase_mix.decode = 0.5 but its profiles have no decode-phase time"):
        f = phase_factors({"prefill": 0.2, "mixed": 0.2}, {"prefill": 0.25, "decode": 0.5, "mixed": 0.25}, "dep")
    assert (0.2 * f["prefill"], 0.2 * f["mixed"]) == pytest.approx((0.2, 0.2))


def test_results_do_not_depend_on_row_order(planted_fleet):
    root, fleet_yaml, traces, ost, _ = planted_fleet
    fleet = load_fleet(fleet_yaml, root, accelerators=ACC)
    first = fleet_weights(ost, traces, fleet)
    again = fleet_weights(ost.sample(fraction=1.0, shuffle=True, seed=7), traces.reverse(), fleet)
    assert first.equals(again)
    assert first.to_arrow().equals(again.to_arrow())


def test_deployment_without_ingested_traces_is_an_error(planted_fleet, tmp_path):
    root, fleet_yaml, traces, ost, _ = planted_fleet
    fleet = load_fleet(fleet_yaml, root, accelerators=ACC)
    kept = traces.filter(~pl.col("path").str.starts_with("mi210/") & ~pl.col("path").str.starts_with("alexnet/"))
    with pytest.raises(FleetError, match="train-misc"):
        fleet_weights(ost, kept, fleet)


def test_more_attributed_than_total_is_an_error(planted_fleet):
    root, fleet_yaml, traces, ost, _ = planted_fleet
    fleet = load_fleet(fleet_yaml, root, accelerators=ACC)
    halved = traces.with_columns(pl.col("gpu_ns") // 1000)
    with pytest.raises(ValueError, match="more than its gpu_ns"):
        fleet_weights(ost, halved, fleet)


def _with_copy(fleet, owner: str, copy: str):
    from dataclasses import replace

    deps = tuple(replace(d, paths=d.paths + (copy,)) if d.id == owner else d for d in fleet.deployments)
    return replace(fleet, deployments=deps)


def test_same_bytes_under_two_names_is_one_profile(planted_fleet):
    root, fleet_yaml, traces, ost, _ = planted_fleet
    fleet = load_fleet(fleet_yaml, root, accelerators=ACC)
    copy = "sglang_decode/copy-of-part0.json.gz"
    dup = traces.filter(pl.col("path") == "sglang_decode/part0.json.gz").with_columns(pl.lit(copy).alias("path"))
    both = pl.concat([traces, dup])
    assert fleet_weights(ost, both, _with_copy(fleet, "chat-sglang", copy)).equals(fleet_weights(ost, traces, fleet))
    with pytest.raises(FleetError, match=r"same bytes.*\['chat-sglang', 'train-misc'\]"):
        fleet_weights(ost, both, _with_copy(fleet, "train-misc", copy))


def test_profile_without_gpu_time_is_left_out_with_a_warning(planted_fleet):
    root, fleet_yaml, traces, ost, _ = planted_fleet
    fleet = load_fleet(fleet_yaml, root, accelerators=ACC)
    empty_path = "alexnet/part0.json.gz"
    empty_id = traces.filter(pl.col("path") == empty_path)["trace_id"][0]
    zeroed = traces.with_columns(pl.when(pl.col("path") == empty_path).then(0).otherwise(pl.col("gpu_ns")).alias("gpu_ns"))
    with pytest.warns(FleetWarning, match="no GPU time.*alexnet/part0"):
        got = fleet_weights(ost.filter(pl.col("trace_id") != empty_id), zeroed, fleet)
    # train-misc now averages over its three mi210 profiles only
    want = expected_fleet(traces.filter(pl.col("path") != empty_path), ost.filter(pl.col("trace_id") != empty_id),
                          planted_fleet[4])
    got_map = {(r["operator"], r["shape"], r["phase"]): r["fleet_card_hours"] for r in got.iter_rows(named=True)}
    assert got_map == pytest.approx(want, rel=1e-12)
