"""Graph replays attributed through the TraceLens capture traces; name rules when there is no capture."""

from __future__ import annotations

import gzip
import json

import polars as pl
import pytest

from ingest.classify import classify_events
from ingest.graphs import capture_traces_for, read_capture, read_captures
from ingest.kineto import TraceError
from ingest.pipeline import read_events

INF = "tracelens/inference"
FULL = f"{INF}/vllm_decode_full/graph_execution.json.gz"
PIECEWISE = f"{INF}/vllm_prefilldecode_piecewise/graph_execution.json.gz"
SGL = f"{INF}/sglang_decode/sglang_Qwen3-8B_decode.json.gz"


def _sidecar(public_traces, rel) -> dict:
    folder = (public_traces / rel).parent / "capture_traces"
    return json.loads((folder / "execution_details.json").read_text())[0]


@pytest.fixture(scope="module")
def classified(public_traces):
    out = {}
    for rel in (FULL, PIECEWISE, SGL):
        path = public_traces / rel
        events = read_events(path)
        out[rel] = (events, classify_events(events, read_captures(capture_traces_for(path))))
    return out


def test_capture_traces_found_from_the_sidecar(public_traces):
    for rel in (FULL, PIECEWISE, SGL):
        found = capture_traces_for(public_traces / rel)
        assert [p.name for p in found] == [_sidecar(public_traces, rel)["file"]]
    assert capture_traces_for(public_traces / "tracelens/b200/eager_trace.json.gz") == []


def test_capture_launches_are_the_window_launch_rows_in_order(public_traces):
    path = (public_traces / FULL).parent / "capture_traces" / _sidecar(public_traces, FULL)["file"]
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    window = next(e for e in events if e.get("cat") == "user_annotation" and e["name"] == "capture_32_FULL")
    inside = sorted(
        (e for e in events
         if e.get("cat") == "cuda_runtime" and "kernel" in e.get("args", {})
         and window["ts"] <= e["ts"] <= window["ts"] + window["dur"]),
        key=lambda e: e["ts"],
    )
    capture = read_capture(path)
    kernels = capture.filter(pl.col("step") != "memcpy")["kernel"].to_list()
    assert kernels == [e["args"]["kernel"] for e in inside]


def test_full_graph_decode_attributed_through_capture(classified):
    events, out = classified[FULL]
    graph = out.filter(pl.col("graph_launch"))
    assert graph.height == events.filter(pl.col("graph_launch")).height > 400
    via_capture = graph.filter(pl.col("attribution") == "graph_capture")["dur_ns"].sum()
    assert via_capture / graph["dur_ns"].sum() >= 0.90
    # Aligned rows inherit the op that launched the same kernel at capture time.
    for kernel, op in (("kernel_unified_attention_3d", "vllm::unified_attention_with_output"),
                       ("_matmul_ogs_", "vllm::moe_forward"), ("Cijk_", "aten::addmm"),
                       ("reshape_and_cache_flash_kernel", "_C_cache_ops::reshape_and_cache_flash")):
        rows = graph.filter(pl.col("kernel").str.contains(kernel, literal=True))
        assert rows.height and rows["op_chain"].list.contains(op).all(), kernel


@pytest.mark.parametrize("rel", [FULL, PIECEWISE, SGL])
def test_capture_shapes_carry_the_captured_batch(public_traces, classified, rel):
    _, out = classified[rel]
    batch = _sidecar(public_traces, rel)["batch_size"]
    gemm = out.filter(pl.col("graph_launch") & (pl.col("operator") == "gemm"))
    assert gemm.height
    # Every GEMM inside a replayed graph has M = the batch size the graph was captured for.
    assert {json.loads(s)["m"] for s in gemm["shape"]} == {batch}


def test_sglang_decode_paged_attention_shape(public_traces, classified):
    _, out = classified[SGL]
    attention = out.filter(pl.col("operator") == "paged_attention_decode")
    assert attention.height and set(attention["attribution"]) == {"graph_capture"}
    shapes = {json.loads(s)["num_seqs"] for s in attention["shape"]}
    assert shapes == {_sidecar(public_traces, SGL)["batch_size"]}


def test_without_capture_graph_rows_fall_back_to_name_rules(classified):
    events, _ = classified[FULL]
    out = classify_events(events)
    graph = out.filter(pl.col("graph_launch"))
    assert set(graph["attribution"]) == {"name_rule"}
    # No op shapes without a capture; only what the step annotation says (sequence count).
    assert set().union(*(json.loads(s).keys() for s in graph["shape"])) == {"num_seqs"}
    assert set(graph.filter(pl.col("shape") != "{}")["operator"]) == {"unified_attention"}
    named = graph.filter(pl.col("operator") != "other")["dur_ns"].sum()
    assert named / graph["dur_ns"].sum() >= 0.95


@pytest.mark.parametrize("rel", [FULL, PIECEWISE, SGL])
def test_classification_keeps_every_row_and_nanosecond(classified, rel):
    events, out = classified[rel]
    assert out.height == events.height
    assert out["dur_ns"].sum() == events["dur_ns"].sum()
    assert (out["kernel"] == events["kernel"]).all()
    non_graph = out.filter(~pl.col("graph_launch"))
    assert set(non_graph["attribution"]) <= {"direct", "launch_only", "unattributed"}


def test_not_a_capture_trace(public_traces):
    path = public_traces / "tracelens/b200/eager_trace.json.gz"
    with pytest.raises(TraceError) as err:
        read_capture(path)
    assert str(path) in str(err.value) and "capture" in str(err.value)


@pytest.mark.parametrize("enabled", [True, False])
def test_a_capture_trace_is_parsed_with_the_collector_off_and_left_as_found(enabled, monkeypatch):
    """Its JSON objects form no cycles: a collection while they pile up walks them all for nothing (0.5-2 s of
    full collections over a fleet's capture traces, more beside Dagster's heap)."""
    import gc
    from pathlib import Path

    import ingest.graphs

    capture = Path(__file__).parents[2] / "examples/traces/llama3-8b/capture_traces/graph.capture.json.gz"
    load, while_parsing = ingest.graphs._load, []

    def watched(path):
        while_parsing.append(gc.isenabled())
        return load(path)

    monkeypatch.setattr(ingest.graphs, "_load", watched)
    (gc.enable if enabled else gc.disable)()
    try:
        frame = read_capture(capture)
        after = gc.isenabled()
    finally:
        gc.enable()
    assert frame.height > 0 and while_parsing == [False] and after is enabled
