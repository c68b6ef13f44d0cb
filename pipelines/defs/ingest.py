"""Ingest assets: one trace file per partition → kernel_events and op_shape_time, and their checks.

A run of one partition parses its trace; a run of many (a backfill: `BackfillPolicy.single_run()`)
ingests them all in one `TraceStore.ingest` call, fanned out over the local pool or the Dask
scheduler of HOTSHAPE_DASK_SCHEDULER, and checks each partition on its own.
"""

import warnings

import dagster as dg
import polars as pl

import ingest.schema as ingest_schema
from pipelines.defs.metadata import column_schema, rounded, table, top_operators
from pipelines.partitions import trace_files
from pipelines.resources import HotshapeStore


def _summary(context, store: HotshapeStore) -> dict:
    summary = store.read_summary(context.partition_key)
    if summary is None:
        raise dg.Failure(f"trace {context.partition_key!r} has not been ingested (not in the trace store)")
    return summary


# One run for a backfill of many partitions: Dagster's per-run cost is paid once, not per trace.
# `backfill_policy` is a beta parameter of @asset in dagster 1.13 (pinned to 1.13.27); only its warning is silenced.
BATCH = dg.BackfillPolicy.single_run()
warnings.filterwarnings("ignore", message="Parameter `backfill_policy`", category=dg.BetaWarning)


def _ingest_batch(context: dg.AssetExecutionContext, store: HotshapeStore) -> dg.MaterializeResult:
    """Every partition of the run ingested in one fan-out; per-trace metadata as one observation each.

    A trace that cannot be read does not fail the batch: its gpu_time_conserved evaluation fails,
    and fleet_weights leaves it out with that reason.
    """
    keys = list(context.partition_keys)
    traces = store.trace_store()
    report = traces.ingest([store.trace_path(k) for k in keys], keys, cluster=store.dask_scheduler)
    for key in keys:
        summary = store.read_summary(key) if key in report.ids else None
        context.log_event(dg.AssetObservation(asset_key=context.asset_key, partition=key, metadata={
            "trace_id": report.ids.get(key, ""), "parsed": report.ids.get(key) in report.parsed,
            "stored": summary is not None, **({"dagster/row_count": summary["events"]} if summary else {})}))
    return dg.MaterializeResult(metadata={"partitions": len(keys), "parsed": len(report.parsed),
                                          "reused": len(report.reused), "unreadable": len(report.unreadable)})


@dg.asset(partitions_def=trace_files, group_name="ingest", kinds={"polars", "parquet"}, backfill_policy=BATCH)
def kernel_events(context: dg.AssetExecutionContext, store: HotshapeStore) -> dg.MaterializeResult:
    """One row per GPU kernel, memcpy and memset of one trace file, attributed to its operator, shape and phase."""
    if len(context.partition_keys) > 1:
        return _ingest_batch(context, store)
    key = context.partition_key
    traces = store.trace_store()
    report = traces.ingest([store.trace_path(key)], [key], jobs=1, cluster=store.dask_scheduler)
    if key not in report.ids:
        raise dg.Failure(f"{key}: {report.unreadable[0]['reason']}")
    trace_id = report.ids[key]
    if traces.summary(trace_id) is None:
        raise dg.Failure(f"{key}: quarantined: {traces.quarantine_reason(trace_id)}")
    summary = store.read_summary(key)
    by_attribution = pl.DataFrame(sorted(summary["by_attribution"].items()), schema=["attribution", "dur_ns"], orient="row")
    return dg.MaterializeResult(metadata=rounded({
        "dagster/row_count": summary["events"],
        "dagster/column_schema": column_schema(ingest_schema.CLASSIFIED_EVENTS),
        "trace_id": trace_id,
        "parsed": trace_id in report.parsed,  # False: the same bytes were already in the store
        "gpu_ms": summary["gpu_ns"] / 1e6,
        "attributed_share": summary["attributed_ns"] / summary["gpu_ns"] if summary["gpu_ns"] else 0.0,
        "kernels": summary["kernels"],
        "by_attribution": table(by_attribution),
        "path": dg.MetadataValue.path(str(store.kernel_events_file(trace_id))),
    }))


@dg.asset(partitions_def=trace_files, group_name="ingest", kinds={"polars", "parquet"}, deps=[kernel_events],
          backfill_policy=BATCH)
def op_shape_time(context: dg.AssetExecutionContext, store: HotshapeStore) -> dg.MaterializeResult:
    """GPU time and calls per operator × shape × phase of one trace file (written to the store with its kernel_events)."""
    if len(context.partition_keys) > 1:
        ids = [s["trace_id"] for k in context.partition_keys if (s := store.read_summary(k)) is not None]
        rows = store.trace_store().scan("op_shape_time", ids).select("trace_id").collect().height
        return dg.MaterializeResult(metadata={"dagster/row_count": rows, "partitions": len(context.partition_keys),
                                              "traces": len(ids)})
    summary = _summary(context, store)
    path = store.op_shape_time_file(summary["trace_id"])
    frame = pl.read_parquet(path)
    top = top_operators(frame, "gpu_ns").with_columns((pl.col("gpu_ns") / 1e6).alias("gpu_ms")).drop("gpu_ns")
    return dg.MaterializeResult(metadata={
        "dagster/row_count": frame.height,
        "dagster/column_schema": column_schema(ingest_schema.OP_SHAPE_TIME),
        "operators": frame["operator"].n_unique(),
        "top_operators": table(top.select("operator", "gpu_ms", "share")),
        "path": dg.MetadataValue.path(str(path)),
    })


# Partition-aware asset checks are a "preview" API in dagster 1.13 (pinned to 1.13.27 in pyproject);
# they are the way to check one trace partition after its own ingest, so the warning is silenced here only.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", dg.PreviewWarning)

    @dg.asset_check(asset=kernel_events, partitions_def=trace_files, blocking=True)
    def gpu_time_conserved(context: dg.AssetCheckExecutionContext, store: HotshapeStore):
        """Attributed + unattributed time in the written kernel_events = all GPU activity time the reader found in the file, in ns."""
        if len(context.partition_keys) > 1:
            yield from _conserved_batch(context, store)
            return
        summary = _summary(context, store)
        found = store.trace_store().conservation(summary["trace_id"])
        yield dg.AssetCheckResult(passed=found.pop("passed"), metadata=found)


def _conserved_batch(context: dg.AssetCheckExecutionContext, store: HotshapeStore):
    """gpu_time_conserved of every partition of a batch run, each evaluation recorded against its own
    partition's materialisation (what fleet_weights' gate reads). Not blocking within the batch: one
    bad trace must not stop op_shape_time of the others; the gate keeps it out of the weights."""
    from dagster._core.definitions.asset_checks.asset_check_evaluation import (
        AssetCheckEvaluationTargetMaterializationData as Target,
    )

    traces = store.trace_store()
    for key in context.partition_keys:
        summary = store.read_summary(key)
        found = traces.conservation(summary["trace_id"]) if summary else {
            "passed": False, "reason": "not in the trace store (unreadable or quarantined)"}
        record = context.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=kernel_events.key, asset_partitions=[key]), limit=1).records[0]
        yield dg.AssetCheckEvaluation(
            asset_key=kernel_events.key, check_name="gpu_time_conserved", passed=found.pop("passed"),
            metadata=found, partition=key, blocking=False,
            target_materialization_data=Target(storage_id=record.storage_id, run_id=record.run_id,
                                               timestamp=record.timestamp))
    yield dg.Output(None, output_name=next(iter(context.op_execution_context.op_def.output_dict)))
