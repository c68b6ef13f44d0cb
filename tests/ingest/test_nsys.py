"""Nsight Systems SQLite export → kernel_events: every GPU activity kept, launches and NVTX op ranges linked."""

from __future__ import annotations

import sqlite3

import polars as pl
import pytest

from ingest.classify import classify_events
from ingest.kineto import TraceError
from ingest.nsys import read_nsys
from ingest.schema import KERNEL_EVENTS

FIXTURE = "nsys-ai/h100_2gpu_1s.sqlite"


@pytest.fixture(scope="module")
def db(public_traces):
    return public_traces / FIXTURE


@pytest.fixture(scope="module")
def events(db):
    return read_nsys(db, "nsysfixture")


def _sql(db, query):
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(query).fetchone()
    finally:
        conn.close()


def test_columns_and_time_conservation(db, events):
    assert events.columns == KERNEL_EVENTS.names
    for table, category in (("KERNEL", "kernel"), ("MEMCPY", "memcpy"), ("MEMSET", "memset")):
        count, total = _sql(db, f"SELECT count(*), sum(end - start) FROM CUPTI_ACTIVITY_KIND_{table}")
        rows = events.filter(pl.col("category") == category)
        assert (rows.height, rows["dur_ns"].sum()) == (count, total)
    assert set(events["trace_id"]) == {"nsysfixture"}


def test_launch_rows_joined_per_process(db, events):
    # Correlation ids restart per process, so the join needs the pid as well (nsys export docs).
    (linked,) = _sql(
        db,
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
        "WHERE r.correlationId = k.correlationId AND (r.globalTid >> 24) % 16777216 = (k.globalPid >> 24) % 16777216)",
    )
    kernels = events.filter(pl.col("category") == "kernel")
    assert kernels.filter(pl.col("launch").is_not_null()).height == linked
    assert set(kernels["launch"].drop_nulls()) <= {"cudaLaunchKernel", "cudaLaunchKernelExC"}  # version suffix dropped


def test_emit_nvtx_ranges_become_the_op_chain(events):
    gemm = events.filter(pl.col("kernel").str.contains("xmma_gemm") & pl.col("op").is_not_null())
    assert gemm.height
    # emit_nvtx labels read "aten::mm, op_id = N": the op id is dropped, the nesting kept.
    assert set(gemm["op"]) <= {"aten::mm", "aten::addmm", "aten::bmm"}
    assert gemm["op_chain"].list.contains("aten::linear").any()
    assert not events["op_chain"].explode().drop_nulls().str.contains("op_id").any()


def test_classified_without_shapes(events):
    out = classify_events(events)
    ops = dict(out.group_by("operator").agg(pl.col("dur_ns").sum()).rows())
    assert ops["gemm"] > 0 and ops["memcpy"] > 0
    # NVTX ranges carry no sizes in this export, so GEMM rows are named but have no shape.
    gemm = out.filter(pl.col("operator") == "gemm")
    assert gemm["op"].drop_nulls().len() and set(gemm["shape"]) == {"{}"}
    # No CUDA graphs in this export (graphId is 0 everywhere).
    assert not out["graph_launch"].any()


def test_not_an_nsys_export(tmp_path):
    bad = tmp_path / "empty.sqlite"
    sqlite3.connect(bad).close()
    with pytest.raises(TraceError) as err:
        read_nsys(bad, "x")
    assert str(bad) in str(err.value) and "CUPTI_ACTIVITY_KIND_KERNEL" in str(err.value)
    text = tmp_path / "notdb.sqlite"
    text.write_text("hello, not a database " * 100)
    with pytest.raises(TraceError) as err:
        read_nsys(text, "x")
    assert str(text) in str(err.value)
