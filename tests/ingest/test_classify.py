"""classify_events / op_shape_time / the report: schemas, conservation, and an independent GEMM cross-check."""

from __future__ import annotations

import bisect
import gzip
import json
from collections import defaultdict

import polars as pl
import pytest

from ingest.classify import classify_events, op_shape_time
from ingest.pipeline import read_events
from ingest.report import format_report, report_numbers
from ingest.schema import CLASSIFIED_EVENTS, OP_SHAPE_TIME

B200 = "tracelens/b200/eager_trace.json.gz"


@pytest.fixture(scope="module")
def b200(public_traces):
    return classify_events(read_events(public_traces / B200))


def test_schema_and_conservation(public_traces, b200):
    raw = read_events(public_traces / B200)
    assert b200.columns == CLASSIFIED_EVENTS.names
    assert b200.height == raw.height and b200["dur_ns"].sum() == raw["dur_ns"].sum()
    table = op_shape_time(b200)
    assert table.columns == OP_SHAPE_TIME.names
    assert table["gpu_ns"].sum() == raw["dur_ns"].sum() and table["calls"].sum() == raw.height
    assert table.select("trace_id", "operator", "shape", "phase").is_duplicated().sum() == 0
    assert table["gpu_ns"].is_sorted(descending=True)


def test_gemm_time_by_shape_matches_an_independent_join(public_traces, b200):
    """GEMM time per (M, N, K) recomputed from the raw JSON: kernel → launch → enclosing aten GEMM op."""
    with gzip.open(public_traces / B200) as f:
        events = json.load(f)["traceEvents"]
    gemm_ops = defaultdict(list)  # tid -> [(ts, end, m, n, k)]
    for e in events:
        if e.get("cat") == "cpu_op" and e["name"] in ("aten::addmm", "aten::mm"):
            dims = [d for d in e["args"]["Input Dims"] if len(d) == 2]
            (m, k), (_, n) = dims[-2], dims[-1]  # addmm(bias, A, B) / mm(A, B): B is [K, N]
            gemm_ops[e["tid"]].append((e["ts"], e["ts"] + e["dur"], m, n, k))
    for ops in gemm_ops.values():
        ops.sort()
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    want = defaultdict(int)
    for e in events:
        if e.get("cat") != "kernel":
            continue
        launch = launches.get(e["args"].get("correlation"))
        if launch is None:
            continue
        ops = gemm_ops.get(launch["tid"], [])
        i = bisect.bisect_right(ops, (launch["ts"], float("inf"))) - 1
        while i >= 0 and ops[i][1] < launch["ts"]:
            i -= 1
        if i >= 0 and ops[i][0] <= launch["ts"] <= ops[i][1]:
            want[ops[i][2:]] += round(e["dur"] * 1000)
    got = defaultdict(int)
    for shape, ns in op_shape_time(b200).filter(pl.col("operator") == "gemm").select("shape", "gpu_ns").rows():
        s = json.loads(shape)
        got[(s["m"], s["n"], s["k"])] += ns
    assert want and dict(got) == dict(want)


def test_taxonomy_override_through_classify(tmp_path, b200):
    custom = tmp_path / "t.yaml"
    custom.write_text("operators: [gemm, other]\nop_rules:\n  - {operator: gemm, op: '^aten::addmm$'}\nkernel_rules: []\n")
    out = classify_events(b200.drop("operator", "shape", "phase", "phase_rule"), taxonomy=custom)
    assert set(out["operator"]) == {"gemm", "other"}
    assert out.filter(pl.col("operator") == "gemm")["op"].unique().to_list() == ["aten::addmm"]


def test_report(b200):
    text = format_report(b200, top=5)
    numbers = report_numbers(b200)
    total = b200["dur_ns"].sum()
    assert numbers["gpu_ns"] == total
    assert numbers["named_ns"] == b200.filter(pl.col("operator") != "other")["dur_ns"].sum()
    top = b200.group_by("operator").agg(pl.col("dur_ns").sum()).sort("dur_ns", descending=True)["operator"][0]
    assert top == "fused_moe"
    assert f"\n{top} " in text and "phase:       prefill 100.0%" in text
    assert f"named operator: {100 * numbers['named_ns'] / total:.1f}%" in text


def test_pipeline_hook_classifies(public_traces):
    from ingest.pipeline import ingest_trace

    result = ingest_trace(public_traces / B200)
    assert {"operator", "shape", "phase", "phase_rule"} <= set(result.events.columns)
