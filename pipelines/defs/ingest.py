"""Ingest assets: one trace file per partition → kernel_events and op_shape_time, and their checks.

A run of one partition parses its trace; a run of many (a backfill: `BackfillPolicy.single_run()`)
ingests them all in one `TraceStore.ingest` call, fanned out over the local pool or the Dask
scheduler of HOTSHAPE_DASK_SCHEDULER, and checks each partition on its own.
"""

import warnings

import dagster as dg
import polars as pl

import ingest.schema as ingest_schema
from flow.build import release_imports
from pipelines.defs.code_versions import code_version
from pipelines.defs.lineage import column_lineage
from pipelines.defs.metadata import (add_partition_metadata, column_schema, markdown_rows, markdown_table, path_value,
                                     rounded, top_operators_by)
from pipelines.partitions import trace_files
from pipelines.resources import HotshapeStore


# One run for a backfill of many partitions: Dagster's per-run cost is paid once, not per trace.
# `backfill_policy` is a beta parameter of @asset in dagster 1.13 (pinned to 1.13.27); only its warning is silenced.
BATCH = dg.BackfillPolicy.single_run()
warnings.filterwarnings("ignore", message="Parameter `backfill_policy`", category=dg.BetaWarning)


def events_figures(store: HotshapeStore, summary, parsed: bool) -> dict:
    """What the UI shows of one partition's kernel_events (its stored TraceSummary): sized for a page per trace."""
    by_attribution = sorted(summary.by_attribution.items())[:15]
    return rounded({
        "dagster/row_count": summary.events,
        "trace_id": summary.trace_id,
        "parsed": parsed,  # False: the same bytes were already in the store
        "gpu_ms": summary.gpu_ns / 1e6,
        "attributed_share": summary.attributed_ns / summary.gpu_ns if summary.gpu_ns else 0.0,
        "kernels": summary.kernels,
        "by_attribution": markdown_rows({"attribution": pl.String, "dur_ns": pl.Int64}, by_attribution),
        "path": path_value(store.kernel_events_file(summary.trace_id)),
    })


@dg.asset(partitions_def=trace_files, group_name="ingest", kinds={"polars", "parquet"}, backfill_policy=BATCH,
          code_version=code_version("ingest", "catalogue"),
          metadata={"dagster/column_schema": column_schema(ingest_schema.CLASSIFIED_EVENTS)})
def kernel_events(context: dg.AssetExecutionContext, store: HotshapeStore) -> dg.MaterializeResult:
    """One row per GPU kernel, memcpy and memset of one trace file, attributed to its operator, shape and phase.

    A run of many partitions ingests them in one fan-out, and a trace that cannot be read does not fail it: its
    gpu_time_conserved evaluation fails, and fleet_weights leaves it out with that reason.
    """
    keys = list(context.partition_keys)
    traces = store.trace_store()
    # while the pool's workers parse, this process imports what the refresh's release card draws with (as
    # `hotshape build` does): it is idle then, and the refresh would otherwise wait on those imports
    report = traces.ingest([store.trace_path(k) for k in keys], keys, jobs=1 if len(keys) == 1 else None,
                           cluster=store.dask_scheduler, meanwhile=release_imports)
    parsed, by_partition = set(report.parsed), {}
    for key in keys:
        trace_id = report.ids.get(key)
        summary = traces.summary(trace_id) if trace_id else None
        if len(keys) == 1 and trace_id is None:
            raise dg.Failure(f"{key}: {report.unreadable[0]['reason']}")
        if len(keys) == 1 and summary is None:
            raise dg.Failure(f"{key}: quarantined: {traces.quarantine_reason(trace_id)}")
        by_partition[key] = events_figures(store, summary, trace_id in parsed) if summary else {"trace_id": trace_id or ""}
        if len(keys) == 1:
            return dg.MaterializeResult(metadata=by_partition[key])
    add_partition_metadata(context, by_partition)
    return dg.MaterializeResult(metadata={"batch_partitions": len(keys), "batch_parsed": len(report.parsed),
                                          "batch_reused": len(report.reused), "batch_unreadable": len(report.unreadable)})


@dg.asset(partitions_def=trace_files, group_name="ingest", kinds={"polars", "parquet"}, deps=[kernel_events],
          backfill_policy=BATCH, code_version=code_version("ingest", "catalogue"),
          metadata={"dagster/column_schema": column_schema(ingest_schema.OP_SHAPE_TIME),
                    "dagster/column_lineage": column_lineage("op_shape_time")})
def op_shape_time(context: dg.AssetExecutionContext, store: HotshapeStore) -> dg.MaterializeResult:
    """GPU time and calls per operator × shape × phase of one trace file (written to the store with its kernel_events)."""
    keys = list(context.partition_keys)  # each use of context.partition_keys resolves the range in the instance again
    traces = store.trace_store()
    # a quarantined trace has an id but no tables: it gets no op_shape_time (its check fails; fleet_weights leaves
    # it out), and the others go on
    ids = {key: tid for key, (_, tid) in batch_traces(context, store, keys).items()
           if tid and traces.summary(tid) is not None}
    if len(keys) == 1 and not ids:
        raise dg.Failure(f"trace {context.partition_key!r} has not been ingested (not in the trace store)")
    # every trace's rows in one query, and every trace's figures in one pass over them: a trace's few small queries
    # cost the frame library ~1 ms each (1.3 s of a 1,303-trace run)
    frame = traces.scan("op_shape_time", ids.values()).collect()
    counts = {tid: (rows, operators) for tid, rows, operators in frame.group_by("trace_id").agg(
        pl.len(), pl.col("operator").n_unique()).iter_rows()}
    tops = {tid: top for (tid,), top in top_operators_by(frame, "trace_id", "gpu_ns").with_columns(
        (pl.col("gpu_ns") / 1e6).alias("gpu_ms")).select("trace_id", "operator", "gpu_ms", "share").partition_by(
        "trace_id", as_dict=True, include_key=False).items()}
    empty = pl.DataFrame(schema={"operator": pl.String, "gpu_ms": pl.Float64, "share": pl.Float64})
    by_partition = {}
    for key, trace_id in ids.items():
        rows, operators = counts.get(trace_id, (0, 0))
        top = tops.get(trace_id, empty)
        by_partition[key] = {
            "dagster/row_count": rows, "trace_id": trace_id, "operators": operators,
            "top_operators": markdown_table(top),
            "path": path_value(traces.file("op_shape_time", trace_id))}
        if len(keys) == 1:
            return dg.MaterializeResult(metadata=by_partition[key])
    add_partition_metadata(context, by_partition)
    return dg.MaterializeResult(metadata={"batch_partitions": len(keys), "batch_traces": len(ids)})


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
        summary = store.read_summary(context.partition_key)
        if summary is None:
            raise dg.Failure(f"trace {context.partition_key!r} has not been ingested (not in the trace store)")
        found = store.trace_store().conservation(summary["trace_id"])
        yield dg.AssetCheckResult(passed=found.pop("passed"), metadata=found)


# the last batch_traces answer, by (run, store, partitions): the check and op_shape_time of one batch run ask the
# same question after kernel_events, whose materialisations no later step changes (reading 1,303 back: ~0.5 s)
_last_batch: dict[tuple, dict[str, tuple]] = {}


def batch_traces(context, store: HotshapeStore, keys: list[str]) -> dict[str, tuple]:
    """Partition → (its kernel_events materialisation record of this run, its trace_id or ''): one query of the
    asset's latest materialisations, no trace file read again. A partition this run did not materialise (the
    asset run on its own) is looked up in the store by its file's bytes, with no record."""
    asked = (context.run.run_id, store.out, tuple(keys))
    if asked in _last_batch:
        return dict(_last_batch[asked])
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=kernel_events.key, asset_partitions=keys), limit=len(keys)).records
    out = {}
    for record in records:
        done = record.asset_materialization
        if record.run_id == context.run.run_id and done.partition not in out:
            out[done.partition] = (record, done.metadata["trace_id"].value if "trace_id" in done.metadata else "")
    for key in keys:
        if key not in out:
            summary = store.read_summary(key)
            out[key] = (None, summary["trace_id"] if summary else "")
    _last_batch.clear()
    _last_batch[asked] = out
    return dict(out)


def _conserved_batch(context: dg.AssetCheckExecutionContext, store: HotshapeStore):
    """gpu_time_conserved of every partition of a batch run, each evaluation recorded against its own
    partition's materialisation (what fleet_weights' gate reads). Not blocking within the batch: one
    bad trace must not stop op_shape_time of the others; the gate keeps it out of the weights."""
    from dagster._core.definitions.asset_checks.asset_check_evaluation import (
        AssetCheckEvaluationTargetMaterializationData as Target,
    )

    traces = store.trace_store()
    keys = list(context.partition_keys)
    done = batch_traces(context, store, keys)
    stored = [tid for _, tid in done.values() if tid and traces.summary(tid) is not None]
    found = traces.conservation_many(stored)
    for key in keys:
        record, trace_id = done.get(key, (None, ""))
        result = dict(found.get(trace_id) or {"passed": False, "reason": "not in the trace store (unreadable or quarantined)"})
        yield dg.AssetCheckEvaluation(
            asset_key=kernel_events.key, check_name="gpu_time_conserved", passed=result.pop("passed"),
            metadata=result, partition=key, blocking=False,
            target_materialization_data=None if record is None else Target(
                storage_id=record.storage_id, run_id=record.run_id, timestamp=record.timestamp))
    yield dg.Output(None, output_name=next(iter(context.op_execution_context.op_def.output_dict)))
