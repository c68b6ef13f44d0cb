"""Ingest assets: one trace file per partition → kernel_events and op_shape_time, and their checks."""

import warnings

import dagster as dg
import polars as pl

from pipelines.defs.metadata import markdown_table, top_operators
from pipelines.partitions import trace_files
from pipelines.resources import HotshapeStore


def _summary(context, store: HotshapeStore) -> dict:
    summary = store.read_summary(context.partition_key)
    if summary is None:
        raise dg.Failure(f"trace {context.partition_key!r} has not been ingested (not in the trace store)")
    return summary


@dg.asset(partitions_def=trace_files, group_name="ingest", kinds={"polars", "parquet"})
def kernel_events(context: dg.AssetExecutionContext, store: HotshapeStore) -> dg.MaterializeResult:
    """One row per GPU kernel, memcpy and memset of one trace file, attributed to its operator, shape and phase."""
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
    return dg.MaterializeResult(metadata={
        "dagster/row_count": summary["events"],
        "trace_id": trace_id,
        "parsed": trace_id in report.parsed,  # False: the same bytes were already in the store
        "gpu_ms": summary["gpu_ns"] / 1e6,
        "attributed_share": summary["attributed_ns"] / summary["gpu_ns"] if summary["gpu_ns"] else 0.0,
        "kernels": summary["kernels"],
        "by_attribution": markdown_table(by_attribution),
        "path": dg.MetadataValue.path(str(store.kernel_events_file(trace_id))),
    })


@dg.asset(partitions_def=trace_files, group_name="ingest", kinds={"polars", "parquet"}, deps=[kernel_events])
def op_shape_time(context: dg.AssetExecutionContext, store: HotshapeStore) -> dg.MaterializeResult:
    """GPU time and calls per operator × shape × phase of one trace file (written to the store with its kernel_events)."""
    summary = _summary(context, store)
    path = store.op_shape_time_file(summary["trace_id"])
    frame = pl.read_parquet(path)
    top = top_operators(frame, "gpu_ns").with_columns((pl.col("gpu_ns") / 1e6).alias("gpu_ms")).drop("gpu_ns")
    return dg.MaterializeResult(metadata={
        "dagster/row_count": frame.height,
        "operators": frame["operator"].n_unique(),
        "top_operators": markdown_table(top.select("operator", "gpu_ms", "share")),
        "path": dg.MetadataValue.path(str(path)),
    })


# Partition-aware asset checks are a "preview" API in dagster 1.13 (pinned to 1.13.27 in pyproject);
# they are the way to check one trace partition after its own ingest, so the warning is silenced here only.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", dg.PreviewWarning)

    @dg.asset_check(asset=kernel_events, partitions_def=trace_files, blocking=True)
    def gpu_time_conserved(context: dg.AssetCheckExecutionContext, store: HotshapeStore) -> dg.AssetCheckResult:
        """Attributed + unattributed time in the written kernel_events = all GPU activity time the reader found in the file, in ns."""
        summary = _summary(context, store)
        found = store.trace_store().conservation(summary["trace_id"])
        return dg.AssetCheckResult(passed=found.pop("passed"), metadata=found)
