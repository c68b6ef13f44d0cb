"""materialize() of every asset on the real example traces, on sqlite and on PostgreSQL."""

from __future__ import annotations

import json

import dagster as dg
import polars as pl
import pytest

from catalogue.roofline import problem_roofline
from pipelines.commands import materialize_all
from release.bundle import read_release
from tests.pipelines.conftest import EXAMPLE_TRACES, definition_metadata, example_store
from weighting.fleet import load_fleet

# Every profile under examples/traces, found without ingest's discover(): graph-capture sidecars are not profiles.
EXAMPLE_KEYS = sorted(p.relative_to(EXAMPLE_TRACES).as_posix() for p in EXAMPLE_TRACES.rglob("*.json.gz")
                      if "capture_traces" not in p.parts)


def _metadata(instance, key: str, partition: str | None = None) -> dict:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(key), asset_partitions=[partition] if partition else None), limit=1
    ).records
    assert records, f"{key}[{partition}] was never materialized"
    return {k: v.value for k, v in records[0].asset_materialization.metadata.items()}


def _roofline_computable(rel, accelerator) -> bool:
    """Independent oracle: every weighted problem gets a roofline from the registry directly."""
    weighted = rel.manifest.join(rel.weights().filter(pl.col("weight") > 0), on="problem_id")
    try:
        for p in weighted.iter_rows(named=True):
            problem_roofline(p["operator"], json.loads(p["init_kwargs"]), json.loads(p["input_kwargs"]), accelerator)
    except (LookupError, ValueError, NotImplementedError):
        return False
    return True


def test_whole_graph_on_examples(materialized_on_sqlite):
    store, summary, instance = materialized_on_sqlite

    assert sorted(instance.get_dynamic_partitions("trace_files")) == EXAMPLE_KEYS
    assert len(EXAMPLE_KEYS) >= 5 and [t["status"] for t in summary["traces"]] == ["ingested"] * len(EXAMPLE_KEYS)
    for key in EXAMPLE_KEYS:
        trace = store.read_summary(key)
        assert trace["path"] == key and trace["attributed_ns"] + trace["unattributed_ns"] == trace["gpu_ns"] > 0
        events = pl.read_parquet(store.kernel_events_file(trace["trace_id"]))
        meta = _metadata(instance, "kernel_events", key)
        assert meta["dagster/row_count"] == events.height == trace["events"]
        assert meta["trace_id"] == trace["trace_id"]
        ost = pl.read_parquet(store.op_shape_time_file(trace["trace_id"]))
        assert int(ost["gpu_ns"].sum()) == trace["gpu_ns"]  # op_shape_time keeps every ns of the trace
        # one markdown table per partition (one string in the event), hottest operator first, as the parquet sums it
        top = _metadata(instance, "op_shape_time", key)["top_operators"].replace("\\", "").splitlines()
        hottest = ost.group_by("operator").agg(pl.col("gpu_ns").sum()).sort(["gpu_ns", "operator"], descending=[True, False])
        assert top[0] == "| operator | gpu_ms | share |" and top[2].startswith(f"| {hottest['operator'][0]} | ")
        assert len(top) == 2 + min(hottest.height, 10)
        assert summary["checks"][f"kernel_events:gpu_time_conserved[{key}]"]

    weights = _metadata(instance, "fleet_weights")
    selected = pl.read_parquet(store.weights_dir / "hot_problems.parquet")
    assert weights["problems"] == selected.height > 0 and weights["traces_used"] == len(EXAMPLE_KEYS)
    assert weights["traces_left_out"] == {}
    assert "gemm" in [r.data["operator"] for r in weights["top_operators"].records]
    described = {c.name: c.description for c in definition_metadata("fleet_weights")["dagster/column_schema"].schema.columns}
    # weighting.schema's descriptions, with the unit, escaped for the UI's markdown
    assert described["fleet_card_hours"].endswith(r"\[card-hour\]")
    columns = {c.name: c for c in definition_metadata("release_bundle")["dagster/column_schema"].schema.columns}
    assert columns["problem_id"].description.startswith("keyed hash")  # release.schema's field descriptions

    rel = read_release(store.release_dir)
    assert summary["release"] == str(store.release_dir) and rel.versions == [1] == [summary["weights_version"]]
    meta = _metadata(instance, "release_bundle")
    assert meta["problems"] == rel.manifest.height and meta["weights_version"] == 1
    assert meta["operator_weights"].startswith("![weight per operator](data:image/png;base64,")
    # coverage as the card and the guide define it (of the problems with weight), recomputed from the sealed
    # per-problem fleet card-hours and fleet.yaml's card-hours
    hours = json.loads(rel.read_bytes("sealed/inputs/v1.json"))["problems"]
    weighted = rel.weights(1).filter(pl.col("weight") > 0)["problem_id"].to_list()
    fleet_hours = sum(d.card_hours for d in load_fleet(store.fleet, store.trace_root).deployments)
    assert meta["coverage_of_fleet"] == pytest.approx(sum(sum(hours[p].values()) for p in weighted) / fleet_hours, rel=1e-3)
    assert meta["weighted_n_problems"] == len(weighted)
    assert _metadata(instance, "weight_drift")["compared_with"] == "nothing (first version)"

    checks = summary["checks"]
    for name in ("fleet_weights:weights_sum_to_one", "fleet_weights:coverage_above_floor",
                 "release_bundle:no_sealed_strings_in_public", "release_bundle:weights_sum_to_one"):
        assert checks[name], name
    # The examples' shapes are still being wired to the work models: whatever the state, the check
    # must agree with the registry asked directly.
    from catalogue.hardware import load_hardware

    assert checks["release_bundle:every_selected_problem_has_roofline"] == _roofline_computable(rel, load_hardware()["H200"])



def test_same_inputs_again_change_nothing(materialized_on_sqlite, tmp_path):
    store, _, instance = materialized_on_sqlite
    before = read_release(store.release_dir).info["files"]
    again = materialize_all(store, instance)
    assert [t["status"] for t in again["traces"]] == ["already ingested"] * len(EXAMPLE_KEYS)
    assert again["refreshed"] is False and read_release(store.release_dir).info["files"] == before


@pytest.mark.postgres
def test_whole_graph_on_postgres_writes_the_same_release(materialized_on_sqlite, postgres_server, tmp_path):
    """The instance's storage changes nothing in the data: the release is byte-for-byte the sqlite one."""
    sqlite_store, sqlite_summary, _ = materialized_on_sqlite
    store = example_store(tmp_path / "out", submissions=str(tmp_path / "no-submissions"))
    url = postgres_server.url(postgres_server.database())
    with dg.instance_for_test(overrides={"storage": {"postgres": {"postgres_url": url}}}) as instance:
        summary = materialize_all(store, instance)
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert sorted(instance.get_dynamic_partitions("trace_files")) == EXAMPLE_KEYS
        assert _metadata(instance, "release_bundle")["problems"] == read_release(store.release_dir).manifest.height
    assert summary["checks"] == sqlite_summary["checks"]
    assert read_release(store.release_dir).info["files"] == read_release(sqlite_store.release_dir).info["files"]


def _release_files(release) -> dict[str, bytes]:
    from pathlib import Path

    return {"release.json": (Path(release) / "release.json").read_bytes(), **read_release(release).all_files()}


def test_the_cli_builds_byte_for_byte_the_release_the_pipeline_built(materialized_on_sqlite, tmp_path):
    """One data path: `hotshape build` over its own trace store writes the release the assets wrote."""
    from flow.build import build_release

    store, _, _ = materialized_on_sqlite
    out = tmp_path / store.release_name
    build_release(store.trace_root, store.fleet, out, policy=store.load_policy(), store=tmp_path / "cli.store")
    cli, pipeline = _release_files(out), _release_files(store.release_dir)
    assert sorted(cli) == sorted(pipeline) and all(cli[k] == pipeline[k] for k in cli), \
        [k for k in cli if cli[k] != pipeline.get(k)]


def test_each_profile_is_parsed_once_per_pipeline_run(materialized_on_sqlite):
    """Every kernel_events partition parsed its trace; the check and the release read the store only."""
    store, _, instance = materialized_on_sqlite
    assert all(_metadata(instance, "kernel_events", key)["parsed"] for key in EXAMPLE_KEYS)
