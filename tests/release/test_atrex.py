"""Atrex-Bench import: 30 operators, 440 problems, weights summing to 1; export round-trips."""

from __future__ import annotations

import hashlib
import json
import math

import polars as pl
import pytest

from release.atrex import AtrexError, export_atrex, import_atrex, read_atrex
from release.bundle import ReleaseIntegrityError, read_release


def _load(atrex_dir, *parts):
    return json.loads((atrex_dir / "data").joinpath(*parts).read_text())


def _shas(root):
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_counts_and_weights(atrex_release):
    rel = read_release(atrex_release)
    assert rel.manifest.height == 440 and rel.manifest["problem_id"].n_unique() == 440
    assert rel.manifest["operator"].n_unique() == 30
    w = rel.weights()
    assert abs(math.fsum(w["weight"].to_list()) - 1.0) < 1e-12
    for p in ("prefill", "decode"):
        assert abs(math.fsum(w[f"weight_{p}"].to_list()) - 1.0) < 1e-12
    assert w["weight_mixed"].sum() == 0.0
    assert rel.info["counts"] == {"problems": 440, "operators": 30}


def _weights_of(rel, operator):
    prov = rel.sealed("provenance").select("problem_id", "source_key")
    return (rel.manifest.filter(pl.col("operator") == operator).join(prov, on="problem_id")
            .join(rel.weights(), on="problem_id")
            .with_columns(pl.col("source_key").str.split("/").list.get(1).alias("sid")))


def test_weight_split_by_call_counts_when_complete_else_equal(atrex_release, atrex_dir):
    rel = read_release(atrex_release)
    imp = _load(atrex_dir, "operator_importance.json")["operators"]
    total = sum(e["importance_score"] for e in imp.values())
    # mrope: every shape has a call count (48, 48, 48, 8, 8).
    meta = _load(atrex_dir, "mrope", "metadata.json")["shapes"]
    counts = {sid: m["call_count"] for sid, m in meta.items()}
    got = dict(_weights_of(rel, "mrope").select("sid", "weight").iter_rows())
    for sid, c in counts.items():
        assert got[sid] == pytest.approx(imp["mrope"]["importance_score"] / total * c / sum(counts.values()), rel=1e-12)
    # fused_add_rms_norm: shape 0 has no call count, so all 19 shapes share equally.
    got = _weights_of(rel, "fused_add_rms_norm")["weight"].to_list()
    assert len(got) == 19
    assert got == pytest.approx([imp["fused_add_rms_norm"]["importance_score"] / total / 19] * 19, rel=1e-12)


def test_phase_tags_decide_phase_weights(atrex_release):
    rel = read_release(atrex_release)
    decode_only = _weights_of(rel, "paged_attention_decode")
    assert (decode_only["weight_prefill"] == 0).all() and (decode_only["weight_decode"] > 0).all()
    prefill_only = _weights_of(rel, "attention_forward")
    assert (prefill_only["weight_decode"] == 0).all() and (prefill_only["weight_prefill"] > 0).all()


def test_manifest_and_published_roofline_match_the_json(atrex_release, atrex_dir):
    rel = read_release(atrex_release)
    row = _weights_of(rel, "rms_norm").filter(pl.col("sid") == "0").row(0, named=True)
    shape = _load(atrex_dir, "rms_norm", "shapes.json")["0"]
    assert json.loads(row["init_kwargs"]) == shape["init_kwargs"]
    assert json.loads(row["input_kwargs"]) == shape["input_kwargs"]
    assert json.loads(row["dtypes"])["input_dtypes"] == {"x": "bf16", "weight": "bf16"}
    pub = _load(atrex_dir, "rms_norm", "roofline.json")["shapes"]["0"]
    roof = rel.sealed("roofline").filter(pl.col("problem_id") == row["problem_id"])
    assert set(roof["hardware"].to_list()) >= {"H20", "XPU-A"}
    for r in roof.filter(pl.col("published_t_sol_s").is_not_null()).iter_rows(named=True):
        assert r["published_t_sol_s"] == pub["SOL_time_ms"][r["hardware"]] / 1000
        assert (r["published_flops_dtype"], r["published_flops"]) == ("bf16", pub["semantic_W_flops"]["bf16"])
        assert (r["published_bytes_read"], r["published_bytes_written"]) == (pub["semantic_Q_read_bytes"], pub["semantic_Q_write_bytes"])


def test_export_round_trips_every_field(atrex_release, atrex_dir, tmp_path):
    export_atrex(atrex_release, tmp_path / "x")
    assert read_atrex(tmp_path / "x") == read_atrex(atrex_dir)
    for src in sorted((atrex_dir / "data").rglob("*.json")):
        rel = src.relative_to(atrex_dir / "data")
        assert json.loads((tmp_path / "x" / "data" / rel).read_text()) == json.loads(src.read_text()), rel


def test_import_export_import_gives_the_same_release(atrex_release, tmp_path):
    export_atrex(atrex_release, tmp_path / "x")
    import_atrex(tmp_path / "x", tmp_path / "again")
    assert _shas(tmp_path / "again") == _shas(atrex_release)


def test_import_is_byte_deterministic(atrex_release, atrex_dir, tmp_path):
    import_atrex(atrex_dir, tmp_path / "second")
    assert _shas(tmp_path / "second") == _shas(atrex_release)


def test_export_with_a_weights_version_uses_normalised_importance(atrex_release, tmp_path):
    export_atrex(atrex_release, tmp_path / "x", weights_version=1)
    imp = json.loads((tmp_path / "x" / "data" / "operator_importance.json").read_text())["operators"]
    assert math.fsum(e["importance_score"] for e in imp.values()) == pytest.approx(1.0, abs=1e-12)


def test_corrupted_import_is_detected_on_read(atrex_release, tmp_path):
    import shutil

    shutil.copytree(atrex_release, tmp_path / "r")
    path = tmp_path / "r" / "sealed" / "roofline.parquet"
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ReleaseIntegrityError, match="sealed/roofline.parquet"):
        read_release(tmp_path / "r")


def test_bad_layout_names_the_file(atrex_dir, tmp_path):
    import shutil

    with pytest.raises(AtrexError, match="operator_importance.json"):
        read_atrex(tmp_path)
    shutil.copytree(atrex_dir / "data", tmp_path / "data")
    (tmp_path / "data" / "mrope" / "roofline.json").write_text('{"shapes": {"0": {}}}')
    with pytest.raises(AtrexError, match="mrope/roofline.json"):
        read_atrex(tmp_path)
    (tmp_path / "data" / "mrope" / "shapes.json").write_text("{oops")
    with pytest.raises(AtrexError, match="mrope/shapes.json: not valid JSON"):
        read_atrex(tmp_path)


def test_regained_roofline_keeps_published_numbers(atrex_dir, tmp_path):
    from release.roofline import load_hardware_or_none, regained_roofline

    table = load_hardware_or_none()
    if not table:
        pytest.skip("catalogue.hardware is not installed")
    import_atrex(atrex_dir, tmp_path / "bare", hardware={})
    bare = read_release(tmp_path / "bare")
    old = bare.sealed("roofline")
    assert old["t_roofline_s"].null_count() == old.height and set(old["hardware"].to_list()) == {"H20", "XPU-A"}
    new = regained_roofline(bare.manifest, old, table)
    assert set(new["hardware"].to_list()) == set(table)
    cols = ["problem_id", "hardware", "published_flops", "published_flops_dtype", "published_bytes_read", "published_bytes_written", "published_t_sol_s"]
    kept = new.filter(pl.col("hardware").is_in(["H20", "XPU-A"])).select(cols).sort("problem_id", "hardware")
    assert kept.equals(old.select(cols).sort("problem_id", "hardware"))
    # Our W agrees with the published one for rms_norm (a documented cross-check of the registry).
    rms = new.join(bare.manifest, on="problem_id").filter((pl.col("operator") == "rms_norm") & (pl.col("hardware") == "H20"))
    assert (rms["flops"] == rms["published_flops"]).all()


def test_environment_key_is_used_and_never_written(atrex_release, atrex_dir, tmp_path, monkeypatch):
    from release import ids

    monkeypatch.setenv(ids.KEY_ENV, "5a" * 32)
    import_atrex(atrex_dir, tmp_path / "r")
    rel = read_release(tmp_path / "r")
    assert rel.info["key_source"] == "environment"
    assert not (tmp_path / "r" / ids.KEY_FILE).exists() and ids.KEY_FILE not in rel.info["files"]
    # Same problems, other key: every id differs, and none can be mapped back without the key.
    default = read_release(atrex_release).manifest
    assert not set(rel.manifest["problem_id"].to_list()) & set(default["problem_id"].to_list())
    assert rel.manifest.drop("problem_id").sort(pl.all()).equals(default.drop("problem_id").sort(pl.all()))
