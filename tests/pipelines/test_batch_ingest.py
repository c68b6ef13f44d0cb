"""A backfill of many trace partitions is one run (BackfillPolicy.single_run): one fan-out ingest, each
partition checked on its own, and the release it leads to is the one the CLI builds."""

from __future__ import annotations

import dagster as dg

from pipelines.definitions import ASSETS, CHECKS
from pipelines.defs.weighting import entering_traces
from release.bundle import read_release
from tests.pipelines.conftest import QUIET, example_store
from weighting.fleet import load_fleet

RANGE = ("dagster/asset_partition_range_start", "dagster/asset_partition_range_end")


def _files(release) -> dict[str, bytes]:
    from pathlib import Path

    return {"release.json": (Path(release) / "release.json").read_bytes(), **read_release(release).all_files()}


def test_a_batch_of_trace_partitions_is_one_run_and_builds_the_cli_release(tmp_path):
    from flow.build import build_release

    store = example_store(tmp_path / "out")
    keys = store.trace_keys()
    with dg.instance_for_test() as inst:
        inst.add_dynamic_partitions("trace_files", keys)
        asked, fetch = [], inst.fetch_materializations  # the run's materialisations read back: once, not per step
        inst.fetch_materializations = lambda records_filter, **kw: asked.append(records_filter) or fetch(records_filter, **kw)
        ingest = dg.materialize(ASSETS + CHECKS, selection=["kernel_events", "op_shape_time"], instance=inst,
                                resources={"store": store}, run_config=QUIET,
                                tags=dict(zip(RANGE, (keys[0], keys[-1]))))
        assert ingest.success
        assert inst.get_materialized_partitions(dg.AssetKey("op_shape_time")) == set(keys)
        assert [f.asset_key for f in asked] == [dg.AssetKey("kernel_events")]
        evaluations = ingest.get_asset_check_evaluations()
        assert sorted(e.partition for e in evaluations) == sorted(keys) and all(e.passed for e in evaluations)
        ids, left_out = entering_traces(inst, store, load_fleet(store.fleet, store.trace_root))
        assert sorted(ids) == sorted(keys) and left_out == []
        refresh = dg.materialize(ASSETS + CHECKS, selection=["fleet_weights", "release_bundle"], instance=inst,
                                 resources={"store": store}, run_config=QUIET)
        assert refresh.success
    out = tmp_path / store.release_name
    build_release(store.trace_root, store.fleet, out, policy=store.load_policy(), store=tmp_path / "cli.store")
    cli, pipeline = _files(out), _files(store.release_dir)
    assert sorted(cli) == sorted(pipeline) and [k for k in cli if cli[k] != pipeline[k]] == []


def test_a_file_that_is_no_trace_fails_only_its_own_check_in_a_batch(tmp_path):
    """A stray JSON file under the trace root is quarantined: its check fails, the others' tables and checks stand
    (it once failed op_shape_time for the whole batch, and so the refresh)."""
    from pipelines.commands import materialize_all
    from tests.pipelines.conftest import dense_store

    store = dense_store(tmp_path, ["llama3-8b-compiled/eager.json.gz", "llama3-8b/eager.json.gz"])
    (tmp_path / "traces" / "sizes.json").write_text('{"llama3-8b/eager.json.gz": 1}\n')
    with dg.instance_for_test() as inst:
        summary = materialize_all(store, inst)
    status = {t["partition"]: t["status"] for t in summary["traces"]}
    assert status == {"llama3-8b-compiled/eager.json.gz": "ingested", "llama3-8b/eager.json.gz": "ingested",
                      "sizes.json": "failed"}
    assert summary["checks"]["kernel_events:gpu_time_conserved[sizes.json]"] is False
    assert summary["refreshed"] and read_release(store.release_dir).versions == [1]


def test_a_trace_file_changed_after_its_ingest_is_left_out_naming_why(tmp_path):
    """fleet_weights' gate hashes every claimed file as it is now: one whose bytes changed since its partition was
    materialised is left out with that reason, the other enters, and a file gone is left out too."""
    from pipelines.commands import materialize_all
    from tests.pipelines.conftest import dense_store

    rels = ["llama3-8b-compiled/eager.json.gz", "llama3-8b/eager.json.gz"]
    store = dense_store(tmp_path, rels)
    with dg.instance_for_test() as inst:
        materialize_all(store, inst)
        fleet = load_fleet(store.fleet, store.trace_root)
        before, _ = entering_traces(inst, store, fleet)
        assert sorted(before) == sorted(rels)
        changed = store.trace_path(rels[0])
        changed.write_bytes(changed.read_bytes() + b"\0")
        ids, left_out = entering_traces(inst, store, fleet)
        assert ids == {rels[1]: before[rels[1]]}
        assert [(x["path"], x["reason"]) for x in left_out] == [
            (rels[0], "file changed since its kernel_events was materialised")]
        assert left_out[0]["trace_id"] not in (None, before[rels[0]])
        changed.unlink()
        _, left_out = entering_traces(inst, store, fleet)
        assert [(x["path"], x["trace_id"]) for x in left_out] == [(rels[0], None)]
