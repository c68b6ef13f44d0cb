"""Ingest assets: one trace file per partition → kernel_events and op_shape_time, and their checks."""

import warnings

import dagster as dg
import polars as pl

from ingest.classify import op_shape_time as op_shape_time_of
from ingest.output import write_parquet_atomic
from ingest.pipeline import ingest_trace, read_events
from ingest.schema import ATTRIBUTED
from pipelines.defs.metadata import markdown_table, top_operators
from pipelines.partitions import trace_files
from pipelines.resources import HotshapeStore


def _summary(context, store: HotshapeStore) -> dict:
    summary = store.read_summary(context.partition_key)
    if summary is None:
        raise dg.Failure(f"trace {context.partition_key!r} has not been ingested (no kernel_events)")
    return summary


@dg.asset(partitions_def=trace_files, group_name="ingest", kinds={"polars", "parquet"})
def kernel_events(context: dg.AssetExecutionContext, store: HotshapeStore) -> dg.MaterializeResult:
    """One row per GPU kernel, memcpy and memset of one trace file, attributed to its operator, shape and phase."""
    key = context.partition_key
    result = ingest_trace(store.trace_path(key), display_path=key)
    summary = result.summary
    path = store.kernel_events_file(summary["trace_id"])
    write_parquet_atomic(result.events, path)
    store.write_summary(key, summary)
    by_attribution = result.events.group_by("attribution").agg(pl.len().alias("rows"), pl.col("dur_ns").sum()).sort("attribution")
    return dg.MaterializeResult(metadata={
        "dagster/row_count": result.events.height,
        "trace_id": summary["trace_id"],
        "gpu_ms": summary["gpu_ns"] / 1e6,
        "attributed_share": summary["attributed_ns"] / summary["gpu_ns"] if summary["gpu_ns"] else 0.0,
        "kernels": summary["kernels"],
        "by_attribution": markdown_table(by_attribution),
        "path": dg.MetadataValue.path(str(path)),
    })


@dg.asset(partitions_def=trace_files, group_name="ingest", kinds={"polars", "parquet"}, deps=[kernel_events])
def op_shape_time(context: dg.AssetExecutionContext, store: HotshapeStore) -> dg.MaterializeResult:
    """GPU time and calls per operator × shape × phase of one trace file."""
    summary = _summary(context, store)
    frame = op_shape_time_of(pl.read_parquet(store.kernel_events_file(summary["trace_id"])))
    path = store.op_shape_time_file(summary["trace_id"])
    write_parquet_atomic(frame, path)
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
        """Attributed + unattributed time in the written kernel_events = all GPU activity time in the trace file, in ns."""
        summary = _summary(context, store)
        written = pl.read_parquet(store.kernel_events_file(summary["trace_id"]), columns=["dur_ns", "attribution"])
        attributed_ns = int(written.filter(pl.col("attribution").is_in(ATTRIBUTED))["dur_ns"].sum())
        unattributed_ns = int(written["dur_ns"].sum()) - attributed_ns
        in_file = read_events(store.trace_path(context.partition_key))
        file_ns = int(in_file["dur_ns"].sum())
        return dg.AssetCheckResult(
            passed=attributed_ns + unattributed_ns == file_ns and written.height == in_file.height,
            metadata={"file_gpu_ns": file_ns, "attributed_ns": attributed_ns, "unattributed_ns": unattributed_ns,
                      "missing_ns": file_ns - attributed_ns - unattributed_ns,
                      "rows_written": written.height, "rows_in_file": in_file.height},
        )
