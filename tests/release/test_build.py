"""build and refresh on real traces: leak-free, byte-deterministic, ids kept across refreshes."""

from __future__ import annotations

import hashlib
import json
import math
import shutil

import polars as pl
import pytest
import yaml

from flow.build import build_release, refresh_release
from release.roofline import load_hardware_or_none
from release.bundle import ReleaseIntegrityError, read_release
from release.sealing import LeakError

INFERENCE = "tracelens/inference"
DECODE = f"{INFERENCE}/sglang_decode/sglang_Qwen3-8B_decode.json.gz"
PREFILL = f"{INFERENCE}/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz"
GRAPH = f"{INFERENCE}/vllm_decode_full/graph_execution.json.gz"


def _hardware():
    # Names only when the hardware table is not installed: the fleet needs known accelerators.
    return load_hardware_or_none() or {"MI300X": None}


def _fleet(path):
    path.write_text(yaml.safe_dump({"window": {"start": "2026-10-01", "end": "2026-10-31"}, "deployments": [
        {"id": "chat-qwen3-8b-prod", "model": "Qwen3-8B", "framework": "sglang", "accelerator": "MI300X",
         "card_hours": 46080, "traces": ["chat/*.json.gz"]},
        {"id": "batch-graph-replay", "model": "graph-model-x", "framework": "vllm", "accelerator": "MI300X",
         "card_hours": 10000, "traces": ["batch/*.json.gz"]},
    ]}))
    return path


@pytest.fixture(scope="module")
def fleet_root(public_traces, tmp_path_factory):
    """A trace root with two real inference traces (one per deployment) and its fleet.yaml."""
    base = tmp_path_factory.mktemp("fleet")
    (base / "root" / "chat").mkdir(parents=True)
    (base / "root" / "batch").mkdir()
    shutil.copy(public_traces / DECODE, base / "root" / "chat" / "decode-replica0.json.gz")
    shutil.copy(public_traces / GRAPH, base / "root" / "batch" / "replica0.json.gz")
    return base / "root", _fleet(base / "fleet.yaml")


@pytest.fixture(scope="module")
def built(fleet_root, tmp_path_factory):
    root, fleet = fleet_root
    out = tmp_path_factory.mktemp("built") / "rel"
    summary = build_release(root, fleet, out, name="bench", hardware=_hardware())
    return out, summary


def _shas(root):
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_build_writes_the_layout_and_passes_the_leak_check(built):
    out, summary = built
    assert summary["leak_check"]["ok"] and summary["leak_check"]["sealed_strings"] > 5
    files = set(_shas(out))
    assert {"release.json", "README.md", "public/manifest.parquet", "public/weights/v1.parquet",
            "sealed/provenance.parquet", "sealed/roofline.parquet"} <= files
    rel = read_release(out)
    assert rel.info["created"] == "2026-10-31"  # from the fleet window, not the clock
    assert abs(math.fsum(rel.weights()["weight"].to_list()) - 1) < 1e-12
    prov = rel.sealed("provenance")
    assert set(prov["problem_id"].to_list()) == set(rel.manifest["problem_id"].to_list())
    assert {"chat-qwen3-8b-prod", "batch-graph-replay"} == set(prov["deployments"].explode().drop_nulls().to_list())
    public = b"".join((out / f).read_bytes() for f in files if not f.startswith("sealed/"))
    for secret in (b"Qwen3-8B", b"chat-qwen3-8b-prod", b"decode-replica0", b"sglang"):
        assert secret.lower() not in public.lower()


def test_build_twice_gives_identical_sha256s(fleet_root, built, tmp_path):
    root, fleet = fleet_root
    build_release(root, fleet, tmp_path / "again", name="bench", hardware=_hardware())
    assert _shas(tmp_path / "again") == _shas(built[0])


def test_a_sealed_name_as_release_name_fails_the_build_and_leaves_nothing(fleet_root, tmp_path):
    root, fleet = fleet_root
    with pytest.raises(LeakError, match="README.md|release.json"):
        build_release(root, fleet, tmp_path / "leaky", name="Qwen3-8B bench", hardware=_hardware())
    # The trace store beside it keeps its parsed traces: they are valid whatever the release is called.
    assert not (tmp_path / "leaky").exists() and [p.name for p in tmp_path.iterdir()] == ["leaky.store"]


def test_corrupted_built_release_is_detected(built, tmp_path):
    shutil.copytree(built[0], tmp_path / "r")
    path = tmp_path / "r" / "public" / "manifest.parquet"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte, wherever the file's content happens to be
    path.write_bytes(bytes(data))
    with pytest.raises(ReleaseIntegrityError, match="public/manifest.parquet"):
        read_release(tmp_path / "r")


def test_refresh_after_adding_a_trace_keeps_ids_and_adds_v2(public_traces, fleet_root, built, tmp_path):
    root, fleet = fleet_root
    shutil.copytree(root, tmp_path / "root")
    shutil.copytree(built[0], tmp_path / "rel")
    before = read_release(tmp_path / "rel")
    shutil.copy(public_traces / PREFILL, tmp_path / "root" / "chat" / "prefill-replica1.json.gz")
    summary = refresh_release(tmp_path / "rel", tmp_path / "root", fleet, hardware=_hardware())
    rel = read_release(tmp_path / "rel")
    assert rel.versions == [1, 2] and summary["version"] == 2
    assert rel.manifest.equals(before.manifest)  # same problems, same ids
    v1, v2 = rel.weights(1), rel.weights(2)
    assert v1.equals(before.weights(1))
    assert sorted(v2["problem_id"].to_list()) == sorted(rel.manifest["problem_id"].to_list())
    for col in ("weight", "weight_decode"):
        assert abs(math.fsum(v2[col].to_list()) - 1) < 1e-12
    drift = rel.drift(2)
    assert drift["total_variation"] > 0 and rel.info["weights"][1]["drift"] == "public/drift/v2.json"
    # The prefill trace brings new hot shapes: listed as candidates, never given weight.
    cands = rel.candidates(2)
    assert cands.height == summary["candidates"] > 0
    assert not set(cands["problem_id"].to_list()) & set(rel.manifest["problem_id"].to_list())
    assert set(rel.sealed("provenance")["problem_id"].to_list()) == set(rel.manifest["problem_id"].to_list())
    # The new trace's id and file name are sealed too (its shapes are only candidates so far).
    assert summary["leak_check"]["ok"]
    assert summary["leak_check"]["sealed_strings"] > built[1]["leak_check"]["sealed_strings"]
    assert b"prefill-replica1" not in (tmp_path / "rel" / "release.json").read_bytes()


def test_refresh_gives_dropped_problems_weight_zero(fleet_root, built, tmp_path):
    root, _ = fleet_root
    shutil.copytree(built[0], tmp_path / "rel")
    # Only the chat deployment's traces now: problems seen only in the batch replica drop out.
    only_chat = tmp_path / "fleet.yaml"
    doc = yaml.safe_load(fleet_root[1].read_text())
    doc["deployments"] = doc["deployments"][:1]
    only_chat.write_text(yaml.safe_dump(doc))
    with pytest.warns(Warning):
        refresh_release(tmp_path / "rel", root, only_chat, hardware=_hardware())
    rel = read_release(tmp_path / "rel")
    prov = rel.sealed("provenance")
    batch_only = {r["problem_id"] for r in prov.iter_rows(named=True) if r["deployments"] == ["batch-graph-replay"]}
    assert batch_only
    v2 = rel.weights(2)
    assert (v2.filter(pl.col("problem_id").is_in(list(batch_only)))["weight"] == 0).all()
    assert abs(math.fsum(v2["weight"].to_list()) - 1) < 1e-12


def test_release_built_without_the_registry_gains_roofline_on_refresh(fleet_root, tmp_path):
    table = load_hardware_or_none()
    if not table:
        pytest.skip("catalogue.hardware is not installed")
    root, fleet = fleet_root
    build_release(root, fleet, tmp_path / "rel", name="bench", hardware={"MI300X": None})
    before = read_release(tmp_path / "rel")
    assert before.info["roofline"] == {"ours": False}
    assert before.sealed("roofline")["t_roofline_s"].null_count() == before.sealed("roofline").height
    refresh_release(tmp_path / "rel", root, fleet, hardware=table)
    after = read_release(tmp_path / "rel")
    roof = after.sealed("roofline")
    assert after.info["roofline"] == {"ours": True}
    assert set(roof["hardware"].to_list()) == set(table) and roof["t_roofline_s"].null_count() < roof.height


def test_cli_build_and_refresh_json(fleet_root, built, tmp_path, capsys):
    from pipelines.cli import main

    root, fleet = fleet_root
    out = tmp_path / "cli"
    assert main(["build", "--traces", str(root), "--fleet", str(fleet), "--out", str(out), "--name", "bench",
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["sha256"] == built[1]["sha256"]  # same inputs, same bytes, whichever way it is built
    assert main(["refresh", str(out), "--traces", str(root), "--fleet", str(fleet), "--created", "2026-11-30",
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["version"] == 2 and summary["dropped"] == 0 and summary["candidates"] == 0
    assert read_release(out).info["weights"][1]["created"] == "2026-11-30"


def test_build_from_an_ingested_store_or_in_parallel_writes_the_same_bytes(fleet_root, built, tmp_path):
    """`hotshape ingest --out S` then `build --store S` (nothing parsed again), or two workers: the same release."""
    from ingest.discovery import discover
    from ingest.output import write_ingest
    from ingest.store import TraceStore

    root, fleet = fleet_root
    write_ingest(discover([str(root)]), tmp_path / "ingested", root=root, jobs=1)
    stored = TraceStore(tmp_path / "ingested").trace_ids()
    build_release(root, fleet, tmp_path / "a" / "bench", hardware=_hardware(), store=tmp_path / "ingested")
    assert TraceStore(tmp_path / "ingested").trace_ids() == stored
    build_release(root, fleet, tmp_path / "b" / "bench", hardware=_hardware(), jobs=2)
    assert _shas(tmp_path / "a" / "bench") == _shas(built[0]) == _shas(tmp_path / "b" / "bench")


def test_every_weights_version_carries_bootstrap_intervals_and_drift_marks_what_exceeds_them(
        public_traces, fleet_root, built, tmp_path):
    root, fleet = fleet_root
    rel = read_release(built[0])
    entry = rel.info["weights"][0]["intervals"]
    assert entry["problems"] == "public/intervals/v1.parquet" and entry["n_boot"] == 1000 and entry["seed"] == 0
    per_problem = pl.read_parquet(built[0] / entry["problems"])
    assert per_problem.select("problem_id", "weight").sort("problem_id").equals(
        rel.weights(1).select("problem_id", "weight").sort("problem_id"))
    assert (per_problem["weight_lo"] <= per_problem["weight_hi"]).all() and (per_problem["n_profiles"] >= 1).all()
    per_operator = pl.read_parquet(built[0] / entry["operators"])
    assert abs(math.fsum(per_operator["weight"].to_list()) - 1) < 1e-12
    assert (per_operator["weight_lo"] <= per_operator["weight"] + 1e-12).all()

    shutil.copytree(root, tmp_path / "root")
    shutil.copytree(built[0], tmp_path / "rel")
    shutil.copy(public_traces / PREFILL, tmp_path / "root" / "chat" / "prefill-replica1.json.gz")
    refresh_release(tmp_path / "rel", tmp_path / "root", fleet, hardware=_hardware())
    rel = read_release(tmp_path / "rel")
    v2 = pl.read_parquet(tmp_path / "rel" / rel.info["weights"][1]["intervals"]["problems"])
    assert sorted(v2["problem_id"].to_list()) == sorted(rel.manifest["problem_id"].to_list())
    drift = rel.drift(2)
    beyond = set(drift["beyond_interval"]["problems"])
    for mover in drift["top_problem_movers"]:
        lo, hi = v2.filter(pl.col("problem_id") == mover["problem_id"]).select("weight_lo", "weight_hi").row(0)
        assert mover["beyond_interval"] == (not lo <= mover["weight_old"] <= hi) == (mover["problem_id"] in beyond)
    # Two very different profiles of one deployment: resampling them spans both, so v1 lies inside v2's intervals.
    assert drift["total_variation"] > 0 and drift["beyond_interval"]["operators"] == []


def test_card_after_refresh_shows_the_newest_versions_numbers(public_traces, fleet_root, built, tmp_path):
    """Once the Coverage and Phase-split sections kept v1's numbers under a v2 header."""
    from release.card import PHASE_COLOURS, operator_colour

    root, fleet = fleet_root
    shutil.copytree(root, tmp_path / "root")
    shutil.copytree(built[0], tmp_path / "rel")
    # Twice the chat deployment's card-hours and a prefill trace: v2's coverage and phase split differ from v1's.
    doc = yaml.safe_load(fleet.read_text())
    doc["deployments"][0]["card_hours"] *= 2
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(doc))
    shutil.copy(public_traces / PREFILL, tmp_path / "root" / "chat" / "prefill-replica1.json.gz")
    refresh_release(tmp_path / "rel", tmp_path / "root", tmp_path / "fleet.yaml", hardware=_hardware())
    rel = read_release(tmp_path / "rel")
    v1, v2 = rel.info["weights"]
    assert v1["phase_split"] != v2["phase_split"] and v1["coverage_report"] != v2["coverage_report"]
    card = (tmp_path / "rel" / "README.md").read_text()
    coverage = card.split("## Coverage (weights v2)")[1].split("##")[0]
    split = card.split("## Phase split (weights v2;")[1].split("##")[0]
    assert f"coverage of fleet: {v2['coverage_report']['coverage_of_fleet']:.4f}" in coverage
    assert f"coverage of fleet: {v1['coverage_report']['coverage_of_fleet']:.4f}" not in coverage
    for phase, share in v2["phase_split"].items():
        assert f"- {phase}: {share:.4f}" in split
    order = [line.split(":")[0][2:] for line in split.strip().splitlines() if line.startswith("- ")]
    assert order == [p for p in PHASE_COLOURS if p in v2["phase_split"]]  # one order in every version
    assert "[public/drift/v2.json](public/drift/v2.json)" in card and "--html drift.html" in card
    assert "## How to evaluate against this release" in card and "## Metric definitions" in card
    assert "coverage of operator time:" in card
    # The operator colour is a function of the name alone.
    assert operator_colour("rms_norm") == operator_colour("rms_norm") and len({operator_colour(o) for o in
                                                                             ("rms_norm", "gemm", "silu_and_mul")}) > 1
    # What each deployment put into v2 is recorded, sealed: the drift's causes are read from it.
    inputs = json.loads(rel.read_bytes("sealed/inputs/v2.json"))
    assert inputs["deployments"]["chat-qwen3-8b-prod"]["card_hours"] == 2 * 46080
    assert len(inputs["deployments"]["chat-qwen3-8b-prod"]["trace_ids"]) == 2


def test_drift_report_names_shapes_and_the_fleet_change_behind_each_large_movement(public_traces, fleet_root, built,
                                                                                   tmp_path, capsys):
    """Once the report showed problem hashes, cut its longest label and did not say what moved a weight."""
    from pipelines.cli import main
    from weighting.drift import shape_labels

    root, fleet = fleet_root
    shutil.copytree(built[0], tmp_path / "rel")
    doc = yaml.safe_load(fleet.read_text())
    doc["deployments"][1]["card_hours"] *= 4  # only the batch deployment's card-hours change
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(doc))
    refresh_release(tmp_path / "rel", root, tmp_path / "fleet.yaml", hardware=_hardware())
    page = tmp_path / "drift.html"
    assert main(["drift", str(tmp_path / "rel" / "public" / "weights" / "v1.parquet"), str(tmp_path / "rel"),
                 "--json", "--html", str(page)]) == 0
    summary = json.loads(capsys.readouterr().out)
    labels = shape_labels(read_release(tmp_path / "rel").manifest)
    large = [m for m in summary["top_problem_movers"] if abs(m["delta"]) >= 0.01]
    assert large
    for mover in large:
        assert mover["shape"] == labels[mover["problem_id"]]
        assert mover["cause"].startswith("deployment batch-graph-replay")
        assert "card-hours 10000 → 40000" in mover["cause"]
    html = page.read_text()
    assert "Causes of the large movements" in html and "…" not in html
    longest = max((labels[m["problem_id"]] for m in summary["top_problem_movers"]), key=len)
    assert html.count(longest.replace('"', "&quot;")) >= 1
    assert not any(m["problem_id"] in html for m in summary["top_problem_movers"])  # shapes, not ids
    assert "Above 0.10 is large" in html and "what it means" in html


def test_coverage_is_of_the_weights_each_version_ships(public_traces, fleet_root, built, tmp_path):
    """Regression: after a refresh the card stated the coverage of a fresh selection (its "44 problems", hot shapes
    the release lacks included) instead of the release's problems that carry v2's weights. Recomputed here from
    the sealed per-problem fleet card-hours (sealed/inputs/vN.json) and fleet.yaml's card-hours, version by version."""
    root, fleet = fleet_root
    shutil.copytree(root, tmp_path / "root")
    shutil.copytree(built[0], tmp_path / "rel")
    doc = yaml.safe_load(fleet.read_text())
    doc["deployments"][1]["card_hours"] *= 3
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(doc))
    shutil.copy(public_traces / PREFILL, tmp_path / "root" / "chat" / "prefill-replica1.json.gz")
    refresh_release(tmp_path / "rel", tmp_path / "root", tmp_path / "fleet.yaml", hardware=_hardware())
    rel = read_release(tmp_path / "rel")
    assert rel.candidates(2).height > 0  # the new trace brings hot shapes the release lacks
    fleet_hours = {1: sum(d["card_hours"] for d in yaml.safe_load(fleet.read_text())["deployments"]),
                   2: sum(d["card_hours"] for d in doc["deployments"])}
    for entry in rel.info["weights"]:
        v = entry["version"]
        weighted = set(rel.weights(v).filter(pl.col("weight") > 0)["problem_id"].to_list())
        per_problem = json.loads(rel.read_bytes(f"sealed/inputs/v{v}.json"))["problems"]
        assert set(per_problem) >= weighted
        expected = math.fsum(h for pid in weighted for h in per_problem[pid].values()) / fleet_hours[v]
        cov = entry["coverage_report"]
        assert cov["n_problems"] == len(weighted), v
        assert cov["coverage_of_fleet"] == pytest.approx(expected, rel=1e-9) == entry["coverage"], v
    v2 = rel.info["weights"][1]["coverage_report"]
    assert v2["selection_n_problems"] > v2["n_problems"]  # the fresh selection is not what ships
    assert v2["selection_coverage_of_fleet"] > v2["coverage_of_fleet"]
    card = (tmp_path / "rel" / "README.md").read_text().split("## Coverage (weights v2)")[1].split("##")[0]
    assert f"coverage of fleet: {v2['coverage_of_fleet']:.4f}" in card
    assert f"n problems: {v2['n_problems']} — problems with weight in this version" in card
